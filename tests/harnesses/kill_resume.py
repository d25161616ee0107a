"""Kill a training run with SIGKILL at random steps, resume it each time, and check that the final weights
are bitwise identical to those of a run never interrupted.

    python -m tests.harnesses.kill_resume [--kills 20] [--steps 60] [--seed 0] [--out-dir runs/kill_resume]
                                          [--save-crashes]

Each run is a real `python -m tformer train` process on a small translation recipe (made up here: a
synthetic English-German TSV corpus) with train.save_every=1, so a kill loses at most the step in flight.
The parent watches metrics.jsonl and sends SIGKILL once the run has logged the chosen step; the process
may have gone a little further by then, which is the point (a kill lands anywhere: inside a step, inside a
checkpoint write). Then `--resume`, and so on; the last run goes to the end. The report counts the kills
that really interrupted a run and whether the final weights equal the uninterrupted run's, tensor by tensor.

`--save-crashes` adds the kills chance rarely deals: at each moment of one save of `last` (`crash_in_save`:
files written, flushed, the old `last` moved aside, the new one in place, the old one removed), a run is
killed, resumed to the end, and compared with the uninterrupted run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import safetensors.torch
import yaml

ROOT = Path(__file__).resolve().parents[2]  # the repository root
WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft".split(), strict=True))


def write_recipe(root: Path, *, steps: int) -> Path:
    """A translation recipe on a synthetic corpus: d=64, 1+1 layers, dropout on (so the RNG matters)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for name, n in (("train", 400), ("valid", 20), ("test", 20)):
        lines = []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
            lines.append(" ".join(words) + "\t" + " ".join(GERMAN[w] for w in words))
        (root / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = {
        "task": "translation",
        "data": {"corpus": "files", "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv"),
                 "test": str(root / "test.tsv"), "vocab_size": 300, "max_tokens": 600, "bleu_sentences": 4},
        "model": {"preset": "transformer-tiny", "overrides": {"d_model": 64, "d_ff": 128, "n_layers": 1,
                                                              "max_len": 64, "dropout": {"residual": 0.1}}},
        "train": {"max_steps": steps, "eval_every": max(steps // 3, 1), "log_every": 1, "save_every": 1,
                  "schedule": {"name": "constant", "warmup": 2}, "optim": {"lr": 1e-3}},
        "decode": {"beam": 1, "max_len_b": 5},
    }
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def command(recipe: Path, out_dir: Path, *, resume: bool, crash: tuple[int, str] | None = None) -> list[str]:
    """`tformer train` continuing (`--resume`) or starting afresh (`--overwrite`: a run left by an earlier
    experiment is replaced); with `crash` = (save, point), through `crash_in_save`."""
    args = ["train", str(recipe), f"out_dir={out_dir}", "--no-progress", "--resume" if resume else "--overwrite"]
    if crash is None:
        return [sys.executable, "-m", "tformer", *args]
    save, point = crash
    return [sys.executable, "-m", "tests.harnesses.crash_in_save", "--save", str(save), "--at", point, "--", *args]


def start(recipe: Path, out_dir: Path, *, resume: bool, crash: tuple[int, str] | None = None) -> subprocess.Popen:
    """A training process; one thread, as every run here uses: another thread count sums in another order,
    and the weights would differ in the last bits for that reason alone. Run from the repository root, so
    that `tests.harnesses` is importable."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command(recipe, out_dir, resume=resume, crash=crash), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def logged_step(out_dir: Path) -> int:
    """The highest training step in out_dir/metrics.jsonl (0 if none yet)."""
    try:
        lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    steps = [0]
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line being written
            continue
        if "loss" in record:
            steps.append(record["step"])
    return max(steps)


def run_killed_at(recipe: Path, out_dir: Path, step: int, *, resume: bool, timeout: float = 300.0) -> bool:
    """Start a run and SIGKILL it once it has logged `step`; True if the kill interrupted it (False if the
    run ended first)."""
    proc = start(recipe, out_dir, resume=resume)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if logged_step(out_dir) >= step:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"training failed (exit {proc.returncode}): {err[-2000:]}")
    return proc.returncode == -signal.SIGKILL


def run_to_end(recipe: Path, out_dir: Path, *, resume: bool) -> None:
    proc = start(recipe, out_dir, resume=resume)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"training failed (exit {proc.returncode}): {err[-2000:]}")


def crashed_in_save(recipe: Path, out_dir: Path, *, save: int, point: str, resume: bool) -> None:
    """A run killed at `point` of its `save`-th save of last (it must die by SIGKILL there)."""
    proc = start(recipe, out_dir, resume=resume, crash=(save, point))
    _, err = proc.communicate(timeout=600)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the run was not killed at {point} of save {save} (exit {proc.returncode}): {err[-2000:]}")


def save_crashes(root: Path, recipe: Path, straight: Path, *, save: int) -> dict[str, bool]:
    """For every moment of a save: kill a fresh run there at its `save`-th save, resume it to the end, and
    compare with `straight`."""
    from tests.harnesses.crash_in_save import POINTS

    result = {}
    for point in POINTS:
        out = root / f"crash-{point}"
        crashed_in_save(recipe, out, save=save, point=point, resume=False)
        run_to_end(recipe, out, resume=True)
        result[point] = identical(straight, out)
    return result


def identical(a: Path, b: Path) -> bool:
    x = safetensors.torch.load_file(str(a / "last" / "model.safetensors"))
    y = safetensors.torch.load_file(str(b / "last" / "model.safetensors"))
    return x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x)


def kill_and_resume(root: Path, *, kills: int, steps: int, seed: int, crashes: bool = False) -> dict:
    """The experiment: one uninterrupted run, one run killed `kills` times; returns the figures."""
    recipe = write_recipe(root, steps=steps)
    straight, killed = root / "straight", root / "killed"
    run_to_end(recipe, straight, resume=False)
    points = sorted(random.Random(seed).sample(range(2, steps), kills))
    interrupted = 0
    for i, step in enumerate(points):
        interrupted += run_killed_at(recipe, killed, step, resume=i > 0)
    run_to_end(recipe, killed, resume=True)
    logged = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    result = {"kill_points": points, "kills": interrupted, "identical": identical(straight, killed),
              "steps_logged_once": logged == list(range(1, steps + 1))}
    if crashes:
        result["save_crashes"] = save_crashes(root, recipe, straight, save=steps // 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default="runs/kill_resume")
    parser.add_argument("--save-crashes", action="store_true", help="also kill at every moment of one save")
    args = parser.parse_args()
    if not 1 <= args.kills <= args.steps - 2:
        parser.error(f"--kills={args.kills} must be in 1..steps-2={args.steps - 2}")
    root = Path(args.out_dir)
    start = time.perf_counter()
    result = kill_and_resume(root, kills=args.kills, steps=args.steps, seed=args.seed, crashes=args.save_crashes)
    result["seconds"] = round(time.perf_counter() - start, 1)
    (root / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    verdict = "identical" if result["identical"] else "DIFFERENT"
    print(f"{result['kills']} of {len(result['kill_points'])} SIGKILLs interrupted the run (at logged steps "
          f"{result['kill_points']}); final weights {verdict} to the uninterrupted run's; every step logged "
          f"once: {result['steps_logged_once']}; {result['seconds']} s")
    if "save_crashes" in result:
        print("killed inside a save, resumed, final weights identical: "
              + ", ".join(f"{point} {'yes' if same else 'NO'}" for point, same in result["save_crashes"].items()))
    sys.exit(0 if result["identical"] and all(result.get("save_crashes", {}).values()) else 1)


if __name__ == "__main__":
    main()
