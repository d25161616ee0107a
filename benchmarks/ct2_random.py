"""tformer against CTranslate2 on the same weights: greedy and beam-4 translation, batch-1 and batch-8 generation;
each side in fp32 and int8 (ours: `tformer.quant.quantize`; CTranslate2's: `to_ct2(quantization="int8")`).

    python -m benchmarks.ct2_speed [--sentences 200 --batch 64 --src-len 40 --new-tokens 40] [--reps 3]
        [--calls 3] [--threads 0] [--gen-new-tokens 64] [--out FILE] [--quick]

The translator is the demo's shape (3 + 3 layers, d 160, d_ff 640, 4 heads, a 4,000-token vocabulary, pre-LN,
tied embeddings) with random weights, normal(0, 0.3) as in `translate_speed`, and an output bias of -1e4 on the
end symbol and on pad, so no sentence ends early: every one gets exactly int(0 * n + new_tokens) tokens from
either side (ours: max_len_a=0, max_len_b=N; CTranslate2: its maximum decoding length, `translate_ids`), and
a beam's hypotheses all finish at that length, so both do the same work. --sentences random sources of
lengths spread over [src_len/2, src_len], --batch a batch (both sides sort by length first).

The GPT is `benchmarks.generate`'s GPT-2 shape (6 layers, d 512, 8 heads, vocabulary 8192, learned positions),
random; greedy continuation of --gen-new-tokens tokens after 32-token prompts, batch 1 and 8, no stop token.

Each contender runs in a process of its own, which builds the same seeded model (and, for CTranslate2, loads
the conversion the parent made), makes one warm-up call and times --calls calls; the four processes of a row
alternate over --reps rounds (reversed every other round), and the median of all timed calls is reported.
Separate processes because one engine's run changes the other's speed in a shared process: after one
CTranslate2 call, our beam-4 step measured 31-33 ms in the same process against 18.5-20 ms in a process of
its own (docs/results.md, "Decoding: one step against CTranslate2"). The ratios are CTranslate2's seconds
over ours (> 1: tformer faster): fp32 against fp32 and int8 against int8. --threads: torch.set_num_threads
and CTranslate2's intra_threads (0: torch's count).
Prints a Markdown table; `--out` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import tformer
from benchmarks.common import apply_quick, seconds, table_head, table_row, write_json
from benchmarks.ct2_parity import ours
from tformer.decoding import Decoder, generate_greedy
from tformer.interop.ct2 import generate_ids, load_ct2, to_ct2, translate_ids
from tformer.quant import quantize

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parent.parent  # the workers run `python -m benchmarks.ct2_random` from here
NEVER = -1e4
QUICK = dict(sentences=8, batch=4, src_len=8, new_tokens=6, gen_new_tokens=4, reps=1, calls=1, small=True)
CONTENDERS = ("tformer fp32", "tformer int8", "ct2 fp32", "ct2 int8")
TASKS = ("greedy", "beam", "gen1", "gen8")
WORKLOAD = ("sentences", "batch", "src_len", "new_tokens", "gen_new_tokens", "calls")  # what a worker is told
NAMES = {"greedy": "translation, greedy, sentences/s", "beam": "translation, beam 4, sentences/s",
         "gen1": "generation, batch 1, tokens/s", "gen8": "generation, batch 8, tokens/s"}
DEMO = dict(d_model=160, d_ff=640, n_heads=4, n_layers=3, vocab_size=4000, max_len=256, output_bias=True,
            norm={"placement": "pre"})
GPT2 = dict(d_model=512, d_ff=2048, n_heads=8, n_layers=6, vocab_size=8192, max_len=512)
SMALL = dict(d_model=32, d_ff=64, n_heads=4, n_layers=1, vocab_size=300, max_len=64)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--batch", type=int, default=64, help="sentences per translation batch")
    p.add_argument("--src-len", type=int, default=40)
    p.add_argument("--new-tokens", type=int, default=40, help="tokens of every translation")
    p.add_argument("--gen-new-tokens", type=int, default=64, help="tokens of every generated continuation")
    p.add_argument("--reps", type=int, default=3, help="rounds: each contender's process runs once a round")
    p.add_argument("--calls", type=int, default=3, help="timed calls in each process, after one warm-up call")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu"],
                   help="both engines on the CPU (`make bench` passes its device to every part)")
    p.add_argument("--small", action="store_true", help=argparse.SUPPRESS)  # --quick's tiny models
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--worker", nargs=3, metavar=("TASK", "CONTENDER", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


def translator(small: bool) -> nn.Module:
    torch.manual_seed(0)
    model = tformer.build_model(tformer.preset("transformer-tiny", {**(SMALL | {"output_bias": True}
                                                                        if small else DEMO)})).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
        model.lm_head.bias.zero_()
        model.lm_head.bias[[model.config.eos_id, model.config.pad_id]] = NEVER
    return model


def gpt(small: bool) -> nn.Module:
    torch.manual_seed(0)
    return tformer.build_model(tformer.preset("gpt-tiny", SMALL if small else GPT2)).eval()


def row(name: str, times: dict[str, float], work: float, unit: str) -> dict:
    """One table row: each contender's median seconds, its rate, and CTranslate2's time over ours."""
    out = dict(task=name, seconds=times, unit=unit, rate={k: work / t for k, t in times.items()},
               fp32_ratio=times["ct2 fp32"] / times["tformer fp32"],
               int8_ratio=times["ct2 int8"] / times["tformer int8"])
    r = out["rate"]
    print(table_row([name, f"{r['tformer fp32']:.1f}", f"{r['ct2 fp32']:.1f}", f"{out['fp32_ratio']:.2f}x",
                     f"{r['tformer int8']:.1f}", f"{r['ct2 int8']:.1f}", f"{out['int8_ratio']:.2f}x"]), flush=True)
    return out


def workload(task: str, args: argparse.Namespace) -> tuple[nn.Module, dict]:
    """The seeded model and inputs of a task, the same in every process: (model, keyword arguments)."""
    gen = torch.Generator().manual_seed(1)
    if task in ("greedy", "beam"):
        model = translator(args.small)
        lengths = torch.randint(max(1, args.src_len // 2), args.src_len + 1, (args.sentences,), generator=gen)
        sources = [torch.randint(4, model.config.vocab_size, (int(n),), generator=gen).tolist() for n in lengths]
        beam = 1 if task == "greedy" else 4
        limits = dict(max_len_a=0.0, max_len_b=args.new_tokens) | (dict(lenpen=1.0) if beam > 1 else {})
        return model, dict(sources=sources, beam=beam, batch_size=args.batch, **limits)
    model = gpt(args.small)
    batch = 1 if task == "gen1" else 8
    prompts = torch.randint(4, model.config.vocab_size, (batch, 32), generator=gen).tolist()
    return model, dict(prompts=prompts, max_new_tokens=args.gen_new_tokens)


def contender_call(task: str, contender: str, directory: Path, args: argparse.Namespace,
                   threads: int) -> Callable[[], list[list[int]]]:
    """One contender's call on a task: ours on the seeded model (quantized for int8), or CTranslate2 on the
    parent's conversion of the same model in `directory`."""
    model, kw = workload(task, args)
    engine, kind = contender.split()
    if engine == "ct2":
        ct2 = load_ct2(directory / f"{'gpt' if task.startswith('gen') else 'translator'}-{kind}", threads=threads)
        if "prompts" in kw:
            return lambda: generate_ids(ct2, kw["prompts"], max_new_tokens=kw["max_new_tokens"])
        return lambda: translate_ids(ct2, **kw)
    if kind == "int8":
        model = quantize(model, "int8")
    if "prompts" in kw:  # the decoding layout kept across calls, as `inference.load` keeps it for its holder
        decoder = Decoder(model)
        return lambda: generate_greedy(decoder, kw["prompts"], max_new_tokens=kw["max_new_tokens"])
    return lambda: ours(model, **kw)


def worker(args: argparse.Namespace) -> None:
    """In a process of its own: one warm-up call, then --calls timed ones; prints seconds and lengths (JSON)."""
    task, contender, directory = args.worker
    fn = contender_call(task, contender, Path(directory), args, torch.get_num_threads())
    lengths = sorted(map(len, fn()))
    times = [seconds(fn, CPU) for _ in range(args.calls)]
    print(json.dumps({"seconds": times, "lengths": lengths}))


def worker_argv(args: argparse.Namespace, threads: int) -> list[str]:
    """The options that give a worker the parent's workload and threads."""
    return ([f"--{k.replace('_', '-')}={getattr(args, k)}" for k in WORKLOAD] + [f"--threads={threads}"]
            + (["--small"] if args.small else []))


def in_process(task: str, contender: str, directory: Path, argv: list[str]) -> dict:
    """Run `worker` in a fresh Python process; its JSON result."""
    command = [sys.executable, "-m", "benchmarks.ct2_random", *argv, "--worker", task, contender, str(directory)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{contender} on {task} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed_row(task: str, directory: Path, argv: list[str], args: argparse.Namespace) -> dict:
    seconds_of: dict[str, list[float]] = {c: [] for c in CONTENDERS}
    lengths = {}
    for rep in range(args.reps):
        for contender in CONTENDERS if rep % 2 == 0 else reversed(CONTENDERS):
            result = in_process(task, contender, directory, argv)
            seconds_of[contender] += result["seconds"]
            lengths[contender] = tuple(result["lengths"])
    work = {"greedy": args.sentences, "beam": args.sentences, "gen1": args.gen_new_tokens,
            "gen8": 8 * args.gen_new_tokens}[task]  # sentences, or tokens generated
    medians = {k: statistics.median(v) for k, v in seconds_of.items()}
    out = row(NAMES[task], medians, work, NAMES[task].split(", ")[-1])
    out["same_lengths"] = len(set(lengths.values())) == 1
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.worker:
        worker(args)
        return {}
    argv = worker_argv(args, threads)
    rows = []
    print(table_head(["task", "tformer fp32", "CTranslate2 fp32", "ratio", "tformer int8", "CTranslate2 int8",
                      "ratio"], "lrrrrrr"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in (("translator", translator(args.small)), ("gpt", gpt(args.small))):
            for q in ("fp32", "int8"):
                to_ct2(model, Path(tmp) / f"{name}-{q}", quantization=None if q == "fp32" else "int8")
        rows = [timed_row(task, Path(tmp), argv, args) for task in TASKS]
    print(f"\nratio: CTranslate2's seconds over tformer's (> 1: tformer faster); {threads} threads each, each "
          "contender in a process of its own; random weights of the demo translator's and a GPT-2 shape; same "
          f"output lengths on every side: {all(r['same_lengths'] for r in rows)}")
    result = dict(args={k: v for k, v in vars(args).items() if k not in ("out", "worker")}, threads=threads,
                  results=rows)
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
