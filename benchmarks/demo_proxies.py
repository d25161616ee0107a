"""Short proxy runs of the demo recipe, to choose between methods (docs/demo-recipe.md, third round).

    python -m benchmarks.demo_proxies --steps 2000 --out runs/proxies [VARIANT ...]

Each variant is the `demo-20` recipe (Adam, the demo before 2026-11-27, which the third and fourth rounds
compared against) plus overrides (VARIANTS below), trained for a **fixed number of steps** with
its schedule ending at the last one, so that the machine's load moves the wall clock but not the result;
runs go two at a time, one thread each (OMP_NUM_THREADS=1, train.threads=1). Each is then scored on all of
Romans (validation, 433 verses) with the recipe's decoding (beam 4): BLEU, chrF, and the last logged
validation perplexity. A variant that changes the cost of a step (an optimizer, a vocabulary) also shows its
seconds per step, which this machine's noise makes rough: the demo's real measure is BLEU in a time budget.
Results are appended to OUT/proxies.jsonl and printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tformer.runs import RunDir

BASE = "demo-20"

# name -> overrides of the BASE recipe; a variant with train.average_last also scores out_dir/averaged
VARIANTS: dict[str, list[str]] = {
    "base": ["train.average_last=3"],  # also the mean of its last 3 evaluations (the last quarter of the run)
    "muon": ["train.optim.name=muon"],
    "muon-lr1e-3": ["train.optim.name=muon", "train.optim.lr=1e-3"],
    "zero": ["model.overrides.init.zero_residual=true"],
    "muon-lr3-zero": ["train.optim.name=muon", "train.optim.lr=3e-3", "model.overrides.init.zero_residual=true"],
    "min0.1": ["train.schedule.min_ratio=0.1"],
    "linear": ["train.schedule.name=linear"],
    "lr3e-3": ["train.optim.lr=3e-3"],
    "untied": ["model.overrides.tie_embeddings=false"],
    "relu2": ["model.overrides.activation=relu2"],
    "batch1200": ["data.max_tokens=1200"],
    "kjv-bbe": ["data.more_sources=[kjv,bbe]"],
    "src3": ["data.more_sources=[kjv,bbe,kj2000]"],
    "tgt-schlachter": ["data.more_targets=[schlachter]"],
    "src3-tgt": ["data.more_sources=[kjv,bbe,kj2000]", "data.more_targets=[schlachter]"],
    "bpe2000": ["data.vocab_size=2000"],
    "bpe8000": ["data.vocab_size=8000"],
    "d192": ["model.overrides.d_model=192", "model.overrides.d_ff=768"],
    "drop0.1": ["model.overrides.dropout={embed: 0.1, residual: 0.1}"],
}


def _train_cmd(name: str, overrides: list[str], steps: int, out: Path, seed: int) -> list[str]:
    eval_every = steps // 8 if any("average_last" in o for o in overrides) else steps // 2
    return [sys.executable, "-m", "tformer", "train", BASE, f"out_dir={out / name}", f"train.max_steps={steps}",
            "train.time_budget_min=null", "train.threads=1", "train.tune_threads=false", f"train.seed={seed}",
            f"train.eval_every={eval_every}", "data.bleu_sentences=100", *overrides, "--overwrite", "--no-progress"]


def _score(checkpoint: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "tformer", "evaluate", "--checkpoint", str(checkpoint), "--split",
                           "valid", "--json", "--no-progress"], capture_output=True, text=True, env=_env())
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    report = json.loads(done.stdout)
    return {k: report[k] for k in ("bleu", "chrf", "degenerate") if k in report}


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _result(name: str, out: Path, seconds: float) -> dict:
    run = RunDir(out / name)
    records = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    steps = [r for r in records if "loss" in r and "step" in r]
    evals = [r for r in records if "eval/valid_ppl" in r]
    row = {"variant": name, "steps": steps[-1]["step"] if steps else 0, "wall_s": round(seconds, 1),
           "s_per_step": round(steps[-1]["elapsed_s"] / steps[-1]["step"], 4) if steps else None,
           "valid_ppl": round(evals[-1]["eval/valid_ppl"], 2) if evals else None}
    row.update(_score(run.last))
    if run.averaged.exists():
        row["averaged"] = _score(run.averaged)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="*", default=["base", "muon"], help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parallel", type=int, default=2, help="runs at once, one thread each")
    parser.add_argument("--out", type=Path, default=Path("runs/proxies"))
    args = parser.parse_args()
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for start in range(0, len(args.variants), args.parallel):
        batch = args.variants[start:start + args.parallel]
        began = time.perf_counter()
        procs = {name: subprocess.Popen(_train_cmd(name, VARIANTS[name], args.steps, args.out, args.seed),
                                        stdout=open(args.out / f"{name}.log", "w"), stderr=subprocess.STDOUT,
                                        env=_env()) for name in batch}
        for name, proc in procs.items():
            if proc.wait():
                print(f"{name}: training failed, see {args.out / name}.log", file=sys.stderr)
                continue
            row = {**_result(name, args.out, time.perf_counter() - began), "seed": args.seed,
                   "overrides": VARIANTS[name]}
            rows.append(row)
            with open(args.out / "proxies.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    print("\n| variant | steps | s/step | valid ppl | valid BLEU | chrF | averaged BLEU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        avg = r.get("averaged", {}).get("bleu")
        print(f"| {r['variant']} | {r['steps']} | {r['s_per_step']} | {r['valid_ppl']} | {r.get('bleu', '-')} | "
              f"{r.get('chrf', '-')} | {'' if avg is None else f'{avg:.2f}'} |")


if __name__ == "__main__":
    main()
