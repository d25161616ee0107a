"""Speculative decoding's speed: the bench GPT alone against the same GPT with a small draft proposing K tokens a
round, greedy, batch 1.

    python -m benchmarks.speculative [--gpt DIR] [--draft DIR] [--train-minutes 8] [--prompts 4]
        [--prompt-tokens 32] [--new-tokens 256] [--draft-tokens 2 4 6] [--reps 3] [--threads 0]
        [--device cpu] [--out FILE] [--quick]

The models (`benchmarks.bench_models`): the GPT of GPT-2's shape trained on the Bible (--gpt, default
runs/bench/gpt/best) and its draft, the gpt-bible-draft recipe distilled from it (its tokenizer, data and
context; 2 layers of width 256; --draft, default runs/bench/gpt-draft-distilled/best); one that is missing is
trained first, for --train-minutes each. The work: --prompts prompts of --prompt-tokens tokens, consecutive
pieces of Acts (the test split) after the start token (or --prompt TEXT, repeated), each continued greedily
by --new-tokens tokens, no stop token, one after another (batch 1: `inference.load` +
`decoding.generate_greedy` with the loaded model's layout for the target alone,
`decoding.speculative_generate` with the draft for each K).

Every contender runs in a process of its own, which loads its models, makes one warm-up call over all the
prompts and times one, watched for other processes (`benchmarks.quiet`); the processes alternate over --reps
rounds (reversed every other round) and each one's fastest call is reported: tokens/s = prompts x new tokens
/ seconds, the speed-up over the target alone (refused as "not a result" when a round of either was not
quiet), the draft's acceptance rate (accepted draft tokens / proposed) and target passes per token, and
whether its tokens are the target alone's ("same": greedy speculative decoding writes the target's tokens,
but for a near-tie that the target's one pass over K + 1 positions rounds the other way).

Prints a Markdown table; `--out` writes the same as JSON. Not a test; not run in CI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import bench_models, machine, quiet
from benchmarks.common import apply_quick, at_least, device_arg, markdown_table, seconds, write_json
from tformer import inference
from tformer.decoding import SpeculativeStats, generate_greedy, speculative_generate

ROOT = Path(__file__).resolve().parent.parent  # the workers run `python -m benchmarks.speculative` from here
ALONE = "target alone"
QUICK = dict(prompts=1, new_tokens=8, draft_tokens=[2], reps=1, quick_models=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpt", type=Path, default=None, help="the target GPT checkpoint (default: the bench's own)")
    p.add_argument("--draft", type=Path, default=None, help="its draft checkpoint (default: the bench's own)")
    p.add_argument("--models-dir", type=Path, default=Path("runs/bench"), help="where missing models are trained")
    p.add_argument("--train-minutes", type=float, default=8.0, help="training time of a model that is missing")
    p.add_argument("--prompts", type=at_least(1), default=4, help="prompts continued one after another")
    p.add_argument("--prompt-tokens", type=at_least(1), default=32, help="tokens of each prompt of Acts")
    p.add_argument("--prompt", action="append", default=None, help="a prompt's text in place of Acts (repeatable)")
    p.add_argument("--new-tokens", type=at_least(1), default=256, help="tokens written after each prompt")
    p.add_argument("--draft-tokens", type=at_least(1), nargs="+", default=[2, 4, 6], help="K of each contender")
    p.add_argument("--reps", type=at_least(1), default=3, help="rounds: each contender's process runs once a round")
    p.add_argument("--threads", type=int, default=0, help="torch's threads in each process (0: torch's count)")
    p.add_argument("--device", type=device_arg, default="cpu")
    quiet.add_threshold_arg(p)
    p.add_argument("--quick-models", action="store_true", help=argparse.SUPPRESS)  # --quick's tiny models
    p.add_argument("--worker", nargs=3, metavar=("K", "GPT", "DRAFT"), help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--quick", action="store_true", help="tiny models trained for a few steps: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


# --- the work, the same in every process ----------------------------------------------------------------


def prompts(loaded: inference.Loaded, args: argparse.Namespace) -> list[list[int]]:
    """The prompts' ids after the start token: --prompt texts, else pieces of Acts."""
    start = [] if loaded.config.bos_id is None else [loaded.config.bos_id]
    if args.prompt:
        texts = [args.prompt[i % len(args.prompt)] for i in range(args.prompts)]
        return [start + loaded.tokenizer.encode(t)[:args.prompt_tokens] for t in texts]
    from tformer.data.text import load_text_corpus

    ids = loaded.tokenizer.encode(" ".join(load_text_corpus("bible", "test")))
    n = args.prompt_tokens
    return [start + ids[i * n:(i + 1) * n] for i in range(args.prompts)]


def contender(k: int, gpt: Path, draft: Path, args: argparse.Namespace) -> Callable[[SpeculativeStats], list]:
    """The call of one contender (K = 0: the target alone) over every prompt, adding its counts to the stats
    it is given."""
    target = inference.load(gpt, device=args.device)
    rows = prompts(target, args)
    if k == 0:
        return lambda stats: [generate_greedy(target.decoder, [r], max_new_tokens=args.new_tokens)[0] for r in rows]
    small = inference.load_draft(draft, target, tokens=k)
    return lambda stats: [speculative_generate(target.decoder, small.model, [r], max_new_tokens=args.new_tokens,
                                               draft_tokens=k, temperature=0, stats=stats)[0] for r in rows]


def worker(args: argparse.Namespace) -> None:
    """In a process of its own: one warm-up call, then one timed, watched for other processes; prints its
    seconds, its round's quiet check, its outputs (the warm-up's: greedy, so the same) and the timed call's
    speculative counts (JSON)."""
    k, gpt, draft = args.worker
    fn = contender(int(k), Path(gpt), Path(draft), args)
    outputs = fn(SpeculativeStats())
    stats = SpeculativeStats()
    took, check = quiet.watch(lambda: seconds(lambda: fn(stats), torch.device(args.device)),
                              threshold=args.quiet_threshold)
    print(json.dumps({"seconds": took, "check": check.as_dict(), "outputs": outputs, "stats": stats.as_dict()}))


# --- the parent ------------------------------------------------------------------------------------------


def in_process(k: int, gpt: Path, draft: Path, argv: list[str]) -> dict:
    command = [sys.executable, "-m", "benchmarks.speculative", *argv, "--worker", str(k), str(gpt), str(draft)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"K={k} failed: {done.stderr.strip().splitlines()[-3:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def name_of(k: int) -> str:
    return ALONE if k == 0 else f"with draft, K={k}"


def measure(gpt: Path, draft: Path, argv: list[str], args: argparse.Namespace) -> list[dict]:
    """One row per contender: its fastest call's rate, speed-up, acceptance, sameness and rounds."""
    ks = [0, *args.draft_tokens]
    best: dict[int, float] = {}
    results: dict[int, dict] = {}
    rounds: dict[int, list[quiet.Check]] = {k: [] for k in ks}
    for rep in range(args.reps):
        for k in ks if rep % 2 == 0 else reversed(ks):
            result = in_process(k, gpt, draft, argv)
            best[k] = min(best.get(k, float("inf")), result["seconds"])
            results[k] = result
            rounds[k].append(quiet.Check.from_dict(result["check"]))
    work = args.prompts * args.new_tokens
    rows = []
    for k in ks:
        stats = results[k]["stats"]
        refused = quiet.refusal({name_of(0): rounds[0], name_of(k): rounds[k]}) if k else None
        rows.append(dict(contender=name_of(k), draft_tokens=k, seconds=best[k], tokens_per_s=work / best[k],
                         speedup=best[0] / best[k], refused=refused,
                         acceptance_rate=stats["acceptance_rate"] if k else None,
                         passes_per_token=stats["rounds"] / stats["tokens"] if k and stats["tokens"] else 1.0,
                         same=results[k]["outputs"] == results[0]["outputs"], outputs=results[k]["outputs"],
                         quiet=quiet.verdict(rounds[k]), rounds=[c.as_dict() for c in rounds[k]]))
    return rows


def markdown(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        speedup = "1" if r["draft_tokens"] == 0 else f"{r['speedup']:.2f}x" + (" not a result" if r["refused"] else "")
        rate = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        cells.append([r["contender"], f"{r['tokens_per_s']:.1f}", speedup, rate, f"{r['passes_per_token']:.2f}",
                      "yes" if r["same"] else "NO", quiet.marks([quiet.Check.from_dict(c) for c in r["rounds"]])])
    head = ["contender", "tokens/s", "speed-up", "acceptance", "target passes a token", "same tokens", "quiet"]
    return markdown_table(head, "lrrrrcl", cells)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.worker:
        worker(args)
        return {}
    quick = args.quick_models
    gpt = bench_models.gpt(args.gpt, minutes=args.train_minutes, root=args.models_dir, quick=quick)
    draft = bench_models.draft(args.draft, minutes=args.train_minutes, root=args.models_dir, teacher=gpt, quick=quick)
    argv = [f"--prompts={args.prompts}", f"--prompt-tokens={args.prompt_tokens}", f"--new-tokens={args.new_tokens}",
            f"--threads={threads}", f"--device={args.device}", f"--quiet-threshold={args.quiet_threshold}",
            *[f"--prompt={p}" for p in args.prompt or []]]
    rows = measure(gpt, draft, argv, args)
    print(markdown(rows))
    print(f"\n{machine.cpu_model()}, torch {torch.__version__}, {args.device}; greedy, batch 1, {args.prompts} "
          f"prompt(s) x {args.new_tokens} new tokens; the fastest of {args.reps} round(s), {threads} threads, each "
          "contender in a process of its own.")
    refused = [f"{r['contender']}: {r['refused']}" for r in rows if r["refused"]]
    print("".join(f"\n{line}" for line in refused))
    result = dict(args={k: v for k, v in vars(args).items() if k not in ("out", "worker")}, threads=threads,
                  cpu=machine.cpu_model(), torch=torch.__version__, gpt=str(gpt), draft=str(draft), results=rows)
    if args.out:
        print(f"wrote {write_json(args.out, result)}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
