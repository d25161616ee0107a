"""tformer against CTranslate2, each run the way its own users run it, on trained models and real text.

    python -m benchmarks.ct2_speed [--translator DIR] [--gpt DIR] [--train-minutes 8] [--sentences 200]
        [--batch 64] [--gen-new-tokens 256] [--reps 3] [--threads 0] [--out FILE] [--quick]

The models (`benchmarks.bench_models`): the demo translator (--translator, default runs/demo/best, the
checkpoint `make demo` leaves) and a GPT of GPT-2's shape trained on the Bible (--gpt, default
runs/bench/gpt/best); one that is missing is trained first, for --train-minutes. Only the models that the
--tasks run are found, trained or converted (`--tasks beam greedy` never touches the GPT). Each is converted
with our own `tformer convert --to-ct2` (`interop.ct2.to_ct2`), fp32 and int8.

Rows, each engine called as its documentation shows:
    translation, greedy / beam 4   the first --sentences of Acts (the translator's test split), text in and
                                   text out. Ours: `inference.load` + `inference.translate` with the run's
                                   decode settings (max length 1.5 n + 10, length penalty, our stopping
                                   rule), batches of --batch. CTranslate2: `Translator.translate_batch` on the
                                   tokenizer's pieces, `beam_size`, `length_penalty` and `max_batch_size` as
                                   ours, `max_decoding_length` the longest sentence's limit, its defaults
                                   otherwise (patience 1: a sentence stops once `beam` hypotheses finished).
    translation, beam 4, equal rule ours with stopping="finished", CTranslate2's rule (only if our default
                                   is the other one)
    generation, batch 1 / batch 8  32-token prompts cut from Acts, --gen-new-tokens new tokens each, no stop
                                   token. Ours: `inference.load` + `decoding.generate_greedy` with the loaded
                                   model's layout. CTranslate2: `Generator.generate_batch(pieces, max_length=N,
                                   min_length=N, include_prompt_in_result=False, end_token=[])`, which
                                   forwards each prompt at once.
Every contender runs in a process of its own (`intra_threads` for CTranslate2, torch's threads for ours,
both --threads, 0: torch's count), which loads its model, makes one warm-up call and times one; the four
processes of a row alternate over --reps rounds (reversed every other round) and each one's fastest call is
reported. The ratios are CTranslate2's seconds over ours (> 1: tformer faster), fp32 against fp32, int8
against int8. "same" is the share of outputs (texts, or token lists) that tformer fp32 and CTranslate2 fp32
agree on. The batch-1 row is also set against the bandwidth bound measured in the same run: the GPT's weight
bytes read once per token at the speed of the fastest streaming read of a buffer of that size at the run's
thread count (`machine.decode_bound`). A contender faster than the bound shows it mismeasured: then no
share of it is printed.

The quiet check (`benchmarks.quiet`): each worker reads /proc/stat around its timed call and reports how
much CPU other processes used meanwhile. The "quiet" column lists the rounds that were not quiet (which
contender, which round, others' share of a core); a ratio that rests on such a round is printed as
"not a result", and the line under the table names the round.

The random-weight rows of the earlier harness (forced lengths, every step the same work on both sides) are
`benchmarks.ct2_random`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import bench_models, machine, quiet
from benchmarks.common import apply_quick, seconds, table_head, table_row, write_json
from tformer import inference
from tformer.checkpoints import load_config
from tformer.decoding import generate_greedy
from tformer.interop.ct2 import checkpoint_to_ct2, ctranslate2, vocabulary
from tformer.tokenization import load_tokenizer

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parent.parent  # the workers run `python -m benchmarks.ct2_speed` from here
CONTENDERS = ("tformer fp32", "tformer int8", "ct2 fp32", "ct2 int8")
PROMPT_TOKENS = 32
QUICK = dict(sentences=6, batch=4, gen_new_tokens=4, reps=1, quick_models=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--translator", type=Path, default=Path("runs/demo/best"), help="a translator checkpoint")
    p.add_argument("--gpt", type=Path, default=None, help="a GPT checkpoint (default: the bench's own)")
    p.add_argument("--models-dir", type=Path, default=Path("runs/bench"), help="where missing models are trained")
    p.add_argument("--train-minutes", type=float, default=8.0, help="training time of a model that is missing")
    p.add_argument("--sentences", type=int, default=200, help="the first N sentences of Acts")
    p.add_argument("--batch", type=int, default=64, help="sentences per translation batch")
    p.add_argument("--gen-new-tokens", type=int, default=256, help="tokens of every generated continuation")
    p.add_argument("--reps", type=int, default=3, help="rounds: each contender's process runs once a round")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--tasks", nargs="+", default=None, choices=sorted(TASKS), help="only these rows")
    p.add_argument("--device", default="cpu", choices=["cpu"], help="both engines on the CPU")
    quiet.add_threshold_arg(p)
    p.add_argument("--quick-models", action="store_true", help=argparse.SUPPRESS)  # --quick's tiny models
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--worker", nargs=4, metavar=("TASK", "CONTENDER", "CHECKPOINT", "CT2"), help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="tiny models trained for a few steps: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


# --- the work, the same in every process ----------------------------------------------------------------


def sentences(checkpoint: Path, n: int) -> list[str]:
    """The first `n` source sentences of the translator's test split (its run's recipe)."""
    from tformer.tasks.translation import load_split, run_recipe

    recipe = run_recipe(checkpoint, command="evaluate", required=True)
    return [s for s, _ in load_split(recipe.data, "test")[:n]]


def prompts(tokenizer: object, batch: int) -> list[list[int]]:
    """`batch` prompts of PROMPT_TOKENS ids each, consecutive pieces of Acts after the start token."""
    from tformer.data.text import load_text_corpus

    ids = tokenizer.encode(" ".join(load_text_corpus("bible", "test")))
    return [ids[i * PROMPT_TOKENS:(i + 1) * PROMPT_TOKENS] for i in range(batch)]


TASKS: dict[str, dict] = {
    "greedy": dict(kind="translator", beam=1, name="translation, greedy, sentences/s"),
    "beam": dict(kind="translator", beam=4, name="translation, beam 4, sentences/s"),
    "beam-equal": dict(kind="translator", beam=4, stopping="finished",
                       name="translation, beam 4, both stopping once beam finished, sentences/s"),
    "gen1": dict(kind="gpt", batch=1, name="generation, batch 1, tokens/s"),
    "gen8": dict(kind="gpt", batch=8, name="generation, batch 8, tokens/s"),
}


def ours(task: str, contender: str, checkpoint: Path, args: argparse.Namespace) -> Callable[[], list]:
    """Our call: the checkpoint loaded once (`inference.load`, int8 quantized at load), then used."""
    spec = TASKS[task]
    quantization = "int8" if contender.endswith("int8") else None
    loaded = inference.load(checkpoint, quantization=quantization)
    if spec["kind"] == "translator":
        texts = sentences(checkpoint, args.sentences)
        decode = inference.with_given(inference.run_decode(checkpoint), beam=spec["beam"], batch_size=args.batch,
                                      stopping=spec.get("stopping"))
        return lambda: inference.translate(loaded.decoder, loaded.tokenizer, texts, decode, truncate=True)
    start = [loaded.config.bos_id] if loaded.config.bos_id is not None else []
    rows = [start + p for p in prompts(loaded.tokenizer, spec["batch"])]
    return lambda: generate_greedy(loaded.decoder, rows, max_new_tokens=args.gen_new_tokens)


def theirs(task: str, contender: str, checkpoint: Path, converted: Path, args: argparse.Namespace,
           threads: int) -> Callable[[], list]:
    """CTranslate2's call, as its documentation shows it: token strings in, token strings out. Only the
    tokenizer and the config are read here, and torch runs nothing in this process: its thread pool would
    compete with CTranslate2's (a user of CTranslate2 runs no torch)."""
    spec = TASKS[task]
    config, _ = load_config(checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    vocab = vocabulary(tokenizer, config.vocab_size)  # the tokenizer's pieces, as the conversion wrote them
    ids = {t: i for i, t in enumerate(vocab)}
    kind = contender.split()[1]
    model_dir = converted / f"{spec['kind']}-{kind}"
    if spec["kind"] == "translator":
        engine = ctranslate2().Translator(str(model_dir), device="cpu", intra_threads=threads)
        texts = sentences(checkpoint, args.sentences)
        decode = inference.run_decode(checkpoint)

        def translate() -> list[str]:
            pieces = [[vocab[i] for i in s] for s in tokenizer.encode_batch(texts)]
            limit = max(int(decode.max_len_a * len(p) + decode.max_len_b) for p in pieces)
            results = engine.translate_batch(pieces, beam_size=spec["beam"], length_penalty=decode.lenpen,
                                             max_decoding_length=limit, max_batch_size=args.batch)
            return [tokenizer.decode([ids[t] for t in r.hypotheses[0]]) for r in results]

        return translate
    engine = ctranslate2().Generator(str(model_dir), device="cpu", intra_threads=threads)
    bos = config.bos_id
    start = [vocab[bos]] if bos is not None else []
    rows = [start + [vocab[i] for i in p] for p in prompts(tokenizer, spec["batch"])]
    n = args.gen_new_tokens

    def generate() -> list[list[int]]:
        results = engine.generate_batch(rows, max_length=n, min_length=n, include_prompt_in_result=False,
                                        end_token=[])
        return [r.sequences_ids[0] for r in results]

    return generate


def worker(args: argparse.Namespace) -> None:
    """In a process of its own: one warm-up call, then one timed, watched for other processes; prints its
    seconds, its round's quiet check and its outputs (JSON)."""
    task, contender, checkpoint, converted = args.worker
    threads = torch.get_num_threads()
    if contender.startswith("ct2"):
        fn = theirs(task, contender, Path(checkpoint), Path(converted), args, threads)
    else:
        fn = ours(task, contender, Path(checkpoint), args)
    outputs = fn()
    took, check = quiet.watch(lambda: seconds(fn, CPU), threshold=args.quiet_threshold)
    print(json.dumps({"seconds": took, "check": check.as_dict(), "outputs": outputs}))


# --- the parent ------------------------------------------------------------------------------------------


def in_process(task: str, contender: str, checkpoint: Path, converted: Path, argv: list[str]) -> dict:
    command = [sys.executable, "-m", "benchmarks.ct2_speed", *argv, "--worker", task, contender, str(checkpoint),
               str(converted)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{contender} on {task} failed: {done.stderr.strip().splitlines()[-3:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed_row(task: str, checkpoint: Path, converted: Path, argv: list[str], args: argparse.Namespace) -> dict:
    """Each contender's fastest call over the rounds, its rate, CTranslate2's time over ours (refused when a
    round of either was not quiet), the share of outputs tformer fp32 and CTranslate2 fp32 agree on, and
    every round's quiet check."""
    best: dict[str, float] = {}
    outputs = {}
    rounds: dict[str, list[quiet.Check]] = {c: [] for c in CONTENDERS}
    for rep in range(args.reps):
        for contender in CONTENDERS if rep % 2 == 0 else reversed(CONTENDERS):
            result = in_process(task, contender, checkpoint, converted, argv)
            best[contender] = min(best.get(contender, float("inf")), result["seconds"])
            outputs[contender] = result["outputs"]
            rounds[contender].append(quiet.Check.from_dict(result["check"]))
    spec = TASKS[task]
    work = args.sentences if spec["kind"] == "translator" else spec["batch"] * args.gen_new_tokens
    a, b = outputs["tformer fp32"], outputs["ct2 fp32"]
    row = dict(task=spec["name"], seconds=best, rate={k: work / t for k, t in best.items()},
               fp32_ratio=best["ct2 fp32"] / best["tformer fp32"], int8_ratio=best["ct2 int8"] / best["tformer int8"],
               same=sum(x == y for x, y in zip(a, b, strict=True)) / len(a),
               quiet=quiet.verdict([c for checks in rounds.values() for c in checks]),
               rounds={k: [c.as_dict() for c in checks] for k, checks in rounds.items()},
               refused={q: quiet.refusal({k: rounds[k] for k in (f"tformer {q}", f"ct2 {q}")})
                        for q in ("fp32", "int8")})
    r = row["rate"]
    ratio = {q: (f"({row[f'{q}_ratio']:.2f}x) not a result" if row["refused"][q] else f"{row[f'{q}_ratio']:.2f}x")
             for q in ("fp32", "int8")}
    loud = [f"{k} {quiet.marks(checks)}" for k, checks in rounds.items() if quiet.verdict(checks) == "not quiet"]
    marks = "; ".join(loud) or ("yes" if row["quiet"] == "quiet" else "unknown")
    print(table_row([spec["name"], f"{r['tformer fp32']:.1f}", f"{r['ct2 fp32']:.1f}", ratio["fp32"],
                     f"{r['tformer int8']:.1f}", f"{r['ct2 int8']:.1f}", ratio["int8"], f"{100 * row['same']:.0f}%",
                     marks]), flush=True)
    return row


def weight_bytes(checkpoint: Path) -> int:
    """Bytes of the weights one decoded token reads: every parameter once (a tied matrix once)."""
    model = inference.load(checkpoint).model
    return sum(p.numel() * p.element_size() for p in model.parameters())


def wanted(args: argparse.Namespace) -> set[str]:
    """The kinds of model ("translator", "gpt") that the --tasks run."""
    return {spec["kind"] for task, spec in TASKS.items() if args.tasks is None or task in args.tasks}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.worker:
        worker(args)
        return {}
    quick, kinds = args.quick_models, wanted(args)
    models = {}
    if "translator" in kinds:
        models["translator"] = bench_models.translator(args.translator, minutes=args.train_minutes,
                                                       root=args.models_dir, quick=quick)
    if "gpt" in kinds:
        models["gpt"] = bench_models.gpt(args.gpt, minutes=args.train_minutes, root=args.models_dir, quick=quick)
    stopping = inference.run_decode(models["translator"]).stopping if "translator" in models else None
    tasks = ["greedy", "beam"] + (["beam-equal"] if stopping != "finished" else []) + ["gen1", "gen8"]
    tasks = [t for t in tasks if TASKS[t]["kind"] in models and (args.tasks is None or t in args.tasks)]
    argv = [f"--sentences={args.sentences}", f"--batch={args.batch}", f"--gen-new-tokens={args.gen_new_tokens}",
            f"--threads={threads}", f"--quiet-threshold={args.quiet_threshold}"]
    print(table_head(["task", "tformer fp32", "CTranslate2 fp32", "ratio", "tformer int8", "CTranslate2 int8",
                      "ratio", "same", "quiet"], "lrrrrrrrl"))
    with tempfile.TemporaryDirectory() as tmp:
        for kind, path in models.items():
            for q in ("fp32", "int8"):
                checkpoint_to_ct2(path, Path(tmp) / f"{kind}-{q}", quantization=None if q == "fp32" else "int8")
        rows = [timed_row(task, models[TASKS[task]["kind"]], Path(tmp), argv, args) for task in tasks]
    bound = bound_of(models["gpt"], rows, threads) if "gpt" in models else None
    refused = [f"{r['task']}, {q}: {r['refused'][q]}" for r in rows for q in ("fp32", "int8") if r["refused"][q]]
    print("".join(f"\n{line}" for line in refused))
    print(f"{machine.cpu_model()}, torch {torch.__version__}, CTranslate2 {ctranslate2().__version__}. "
          f"ratio: CTranslate2's seconds over tformer's (> 1: tformer faster), the fastest of {args.reps} "
          f"round(s); {threads} threads each, each contender in a process of its own"
          + (f"; stopping: tformer {stopping!r}, CTranslate2 patience 1 (once beam hypotheses finished)"
             if stopping else "") + "." + (f" {bound_text(bound)}" if bound else ""))
    result = dict(args={k: v for k, v in vars(args).items() if k not in ("out", "worker")}, threads=threads,
                  cpu=machine.cpu_model(), ctranslate2=ctranslate2().__version__, torch=torch.__version__,
                  translator=str(models.get("translator")) if "translator" in models else None,
                  gpt=str(models["gpt"]) if "gpt" in models else None, stopping=stopping, bound=bound, results=rows)
    if args.out:
        write_json(args.out, result)
    return result


def bound_of(gpt: Path, rows: list[dict], threads: int) -> dict:
    """The batch-1 bound (`machine.decode_bound`: the GPT's weights at the best streaming read, `threads`
    threads), with the fp32 engines' batch-1 rates as shares of it, if that row ran."""
    bound = machine.decode_bound(CPU, weight_bytes(gpt), threads=threads)
    gen1 = next((r for r in rows if r["task"].startswith("generation, batch 1")), None)
    rates = {engine: gen1["rate"][f"{engine} fp32"] for engine in ("tformer", "ct2")} if gen1 else {}
    return machine.against_bound(bound, rates)


def bound_text(bound: dict) -> str:
    text = (f"Batch-1 bandwidth bound: {bound['weight_bytes'] / 2**20:.1f} MiB of weights at "
            f"{bound['bandwidth_gb_s']:.1f} GB/s (best streaming read, {bound['threads']} threads) -> "
            f"{bound['tokens_per_s']:.0f} tokens/s")
    if bound["mismeasured"]:
        return f"{text}; {bound['mismeasured']}: no share of it is a result."
    if bound.get("tformer_share") is None:
        return text + "."
    return f"{text}; tformer {100 * bound['tformer_share']:.0f}%, CTranslate2 {100 * bound['ct2_share']:.0f}%."


if __name__ == "__main__":
    main()
