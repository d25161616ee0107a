"""tformer against CTranslate2 on the same weights: greedy and beam-4 translation, batch-1 and batch-8 generation;
each side in fp32 and int8 (ours: `tformer.quant.quantize`; CTranslate2's: `to_ct2(quantization="int8")`).

    python -m benchmarks.ct2_speed [--sentences 200 --batch 64 --src-len 40 --new-tokens 40] [--reps 3]
        [--threads 0] [--gen-new-tokens 64] [--out FILE] [--quick]

The translator is the demo's shape (3 + 3 layers, d 160, d_ff 640, 4 heads, a 4,000-token vocabulary, pre-LN,
tied embeddings) with random weights, normal(0, 0.3) as in `translate_speed`, and an output bias of -1e4 on the
end symbol and on pad, so no sentence ends early: every one gets exactly int(0 * n + new_tokens) tokens from
either side (ours: max_len_a=0, max_len_b=N; CTranslate2: its maximum decoding length, `translate_ids`), and
a beam's hypotheses all finish at that length, so both do the same work. --sentences random sources of
lengths spread over [src_len/2, src_len], --batch a batch (both sides sort by length first).

The GPT is `benchmarks.generate`'s GPT-2 shape (6 layers, d 512, 8 heads, vocabulary 8192, learned positions),
random; greedy continuation of --gen-new-tokens tokens after 32-token prompts, batch 1 and 8, no stop token.

Contenders alternate within each of --reps rounds (`common.alternate`), after one warm-up call each; the
median is reported. The ratios are CTranslate2's seconds over ours (> 1: tformer faster): fp32 against fp32
and int8 against int8. --threads: torch.set_num_threads and CTranslate2's intra_threads (0: torch's count).
Prints a Markdown table; `--out` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import tformer
from benchmarks.common import alternate, apply_quick, write_json
from benchmarks.ct2_parity import ours
from tformer.decoding import generate_greedy
from tformer.interop.ct2 import CT2Model, generate_ids, load_ct2, to_ct2, translate_ids
from tformer.quant import quantize

CPU = torch.device("cpu")
NEVER = -1e4
QUICK = dict(sentences=8, batch=4, src_len=8, new_tokens=6, gen_new_tokens=4, reps=1, small=True)
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
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu"],
                   help="both engines on the CPU (`make bench` passes its device to every part)")
    p.add_argument("--small", action="store_true", help=argparse.SUPPRESS)  # --quick's tiny models
    p.add_argument("--out", type=Path, default=None)
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
    print(f"| {name} | {r['tformer fp32']:.1f} | {r['ct2 fp32']:.1f} | {out['fp32_ratio']:.2f}x | "
          f"{r['tformer int8']:.1f} | {r['ct2 int8']:.1f} | {out['int8_ratio']:.2f}x |", flush=True)
    return out


def timed_row(name: str, calls: dict[str, Callable[[], list[list[int]]]], reps: int, work: float, unit: str) -> dict:
    lengths = {k: sorted(map(len, fn())) for k, fn in calls.items()}  # the warm-up; the same work on every side
    result = row(name, {k: statistics.median(v) for k, v in alternate(calls, CPU, reps).items()}, work, unit)
    result["same_lengths"] = len({tuple(v) for v in lengths.values()}) == 1
    return result


def engines(model: nn.Module, tmp: Path, name: str, threads: int) -> dict[str, CT2Model]:
    out = {}
    for q in ("fp32", "int8"):
        to_ct2(model, tmp / f"{name}-{q}", quantization=None if q == "fp32" else "int8")
        out[q] = load_ct2(tmp / f"{name}-{q}", threads=threads)
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    gen = torch.Generator().manual_seed(1)
    rows = []
    print("| task | tformer fp32 | CTranslate2 fp32 | ratio | tformer int8 | CTranslate2 int8 | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        model = translator(args.small)
        cfg = model.config
        lengths = torch.randint(max(1, args.src_len // 2), args.src_len + 1, (args.sentences,), generator=gen)
        sources = [torch.randint(4, cfg.vocab_size, (int(n),), generator=gen).tolist() for n in lengths]
        models = {"fp32": model, "int8": quantize(copy.deepcopy(model), "int8")}
        ct2 = engines(model, Path(tmp), "translator", threads)
        limits = dict(max_len_a=0.0, max_len_b=args.new_tokens)
        for beam in (1, 4):
            s = dict(limits, lenpen=1.0) if beam > 1 else limits
            calls = {f"tformer {q}": (lambda m=m, s=s, b=beam: ours(m, sources, beam=b, batch_size=args.batch, **s))
                     for q, m in models.items()}
            calls |= {f"ct2 {q}": (lambda e=e, s=s, b=beam: translate_ids(e, sources, beam=b, batch_size=args.batch,
                                                                          **s)) for q, e in ct2.items()}
            name = "translation, greedy" if beam == 1 else f"translation, beam {beam}"
            rows.append(timed_row(f"{name}, sentences/s", calls, args.reps, args.sentences, "sentences/s"))
        model = gpt(args.small)
        models = {"fp32": model, "int8": quantize(copy.deepcopy(model), "int8")}
        ct2 = engines(model, Path(tmp), "gpt", threads)
        for batch in (1, 8):
            prompts = torch.randint(4, model.config.vocab_size, (batch, 32), generator=gen).tolist()
            n = args.gen_new_tokens
            calls = {f"tformer {q}": (lambda m=m, p=prompts, n=n: generate_greedy(m, p, max_new_tokens=n))
                     for q, m in models.items()}
            calls |= {f"ct2 {q}": (lambda e=e, p=prompts, n=n: generate_ids(e, p, max_new_tokens=n))
                      for q, e in ct2.items()}
            rows.append(timed_row(f"generation, batch {batch}, tokens/s", calls, args.reps, batch * n, "tokens/s"))
    print(f"\nratio: CTranslate2's seconds over tformer's (> 1: tformer faster); {threads} threads each; "
          "random weights of the demo translator's and a GPT-2 shape; same output lengths on every side: "
          f"{all(r['same_lengths'] for r in rows)}")
    result = dict(args={k: v for k, v in vars(args).items() if k != "out"}, threads=threads, results=rows)
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
