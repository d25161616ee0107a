"""Training speed against CPU threads on a shared machine: the recipe's first steps with every core's thread
(torch's default), with one thread, and with `train.tune_threads`, alone and beside `--busy` other processes
that each keep one core busy (a stand-in for whatever else a user's machine runs). Contenders alternate
within each round, so a machine that gets busier penalises none of them.

    python -m benchmarks.threads [--recipe demo] [--steps 140] [--busy 0 1] [--rounds 2]

Prints steps per second (from the first logged step to the last, so start-up and the first step's
allocations do not count) and each contender's ratio to torch's default; writes --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import apply_quick, write_json
from tformer.runs import RunDir

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = {"default": ["train.tune_threads=false"], "one thread": ["train.threads=1", "train.tune_threads=false"],
              "tuned": ["train.tune_threads=true"]}


def steps_per_s(records: list[dict]) -> float:
    """Steps per second between the first and the last logged training step."""
    steps = [r for r in records if "elapsed_s" in r and "loss" in r]
    if len(steps) < 2:
        raise ValueError("need at least two logged steps: raise --steps or lower the recipe's log_every")
    first, last = steps[0], steps[-1]
    return (last["step"] - first["step"]) / (last["elapsed_s"] - first["elapsed_s"])


@contextmanager
def busy(n: int) -> Iterator[None]:
    """`n` processes that each spin on one core until the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def train_speed(recipe: str, steps: int, extra: list[str], out_dir: Path) -> float:
    command = [sys.executable, "-m", "tformer", "train", recipe, f"train.max_steps={steps}", "train.log_every=20",
               "train.eval_every=1000000", f"out_dir={out_dir}", *extra, "--overwrite", "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # torch's default: one per core
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    lines = RunDir(out_dir).metrics.read_text().splitlines()
    return steps_per_s([json.loads(line) for line in lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="demo")
    parser.add_argument("--steps", type=int, default=140)
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1], help="processes spinning beside the run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="docs/bench/threads.json")
    parser.add_argument("--quick", action="store_true", help="60 steps, one round")
    args = parser.parse_args(argv)
    if args.quick:
        apply_quick(parser, args, {"steps": 60, "rounds": 1})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n_busy in args.busy:
            speeds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
            with busy(n_busy):
                for r in range(args.rounds):
                    order = list(CONTENDERS) if r % 2 == 0 else list(reversed(CONTENDERS))
                    for name in order:
                        speeds[name].append(train_speed(args.recipe, args.steps, CONTENDERS[name], Path(tmp) / "run"))
            base = statistics.median(speeds["default"])
            for name, values in speeds.items():
                rows.append({"busy": n_busy, "contender": name, "steps_per_s": statistics.median(values),
                             "runs": values, "vs_default": statistics.median(values) / base})
                print(f"busy {n_busy}  {name:<11} {statistics.median(values):6.2f} steps/s  "
                      f"{statistics.median(values) / base:5.2f}x default")
    write_json(args.out, {"recipe": args.recipe, "steps": args.steps, "rounds": args.rounds,
                          "cpus": os.cpu_count(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
