"""`make bench`: every speed benchmark in sequence, one results file and one README with the targets.

    python -m benchmarks.bench [--device cuda] [--out-dir docs/bench] [--skip PART ...] [--quick]

Parts, run one after the other in this process (each a module of this package with a `main(argv)`):
    machine           fp32 matmul GFLOP/s, copy, mat-vec and streaming-read bandwidth (benchmarks/machine.py)
    train_speed       training tokens/s and MFU against transformers and torch.nn.Transformer
    generate          batch-1 and batch-8 GPT generation against transformers' generate
    translate_speed   greedy and beam-4 translation against MarianMTModel.generate
    ct2_speed         against CTranslate2 run as its users run it, on trained models (the demo translator on
                      Acts, a GPT-2-shaped GPT): greedy / beam-4 translation, batch-1 / batch-8 generation of
                      256 tokens, fp32 and int8 on each side; models that are missing are trained first
    attention_memory  the longest sequence one exact attention layer handles within 4 GiB
Each part writes its JSON (its `--out`) and prints Markdown, which is captured for the README. A part that
fails is recorded with its error and the others still run.

Writes OUT/results.json (every part's JSON, the machine, the date, the targets) and OUT/README.md (one
section per part, and the targets table: measured ratio, threshold, met / not met). Every part checks the
machine around each timed round (`benchmarks.quiet`): a target whose figure rests on a round in which other
processes used the cores (or on a bandwidth bound a contender beat) is "not a result", and the line under
the table says which round, and how much of the cores the others took. `--quick` runs tiny
sizes as a smoke test and writes to runs/bench-quick unless --out-dir is given: its numbers mean nothing.

The CTranslate2 part runs trained models: runs/demo/best (`make demo`) and the bench's GPT; each that is
missing is trained first, 8 minutes each (`benchmarks/bench_models.py`), then kept under runs/bench/.

torch.compile is measured where it could pay, batch-1 generation (Python overhead between small products):
`generate --compile` adds a `tformer compiled` row, its first (compiling) call reported apart. Training is
matmul-bound on both sides, so compiling it would not change the comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import io
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TextIO

from benchmarks import machine, quiet
from benchmarks.common import device_arg

PARTS = ("train_speed", "generate", "translate_speed", "ct2_speed", "attention_memory")
QUICK_ARGS = {
    "train_speed": ["--quick"],
    "generate": ["--layers", "1", "--d-model", "64", "--heads", "4", "--vocab", "256", "--prompt-len", "8",
                 "--new-tokens", "8", "--batches", "1", "--reps", "1"],
    "translate_speed": ["--quick"],
    "ct2_speed": ["--quick"],
    "attention_memory": ["--quick"],
}
FULL_ARGS = {"generate": ["--compile"]}  # the optional torch.compile row: a minute of compiling, full runs only
TITLES = {"machine": "Machine limits", "train_speed": "Training speed (benchmarks/train_speed.py)",
          "generate": "Generation speed (benchmarks/generate.py)",
          "translate_speed": "Translation decoding speed (benchmarks/translate_speed.py)",
          "ct2_speed": "Against CTranslate2, fp32 and int8 (benchmarks/ct2_speed.py)",
          "attention_memory": "Attention within 4 GiB (benchmarks/attention_memory.py)"}
# HF attention implementation -> the training speed-up over it we aim for ("HF default" = its eager code).
TRAIN_THRESHOLDS = {"eager": 1.5, "sdpa": 1.1}
MFU_TARGET = 0.85


class Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy (a part's Markdown)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, s: str) -> int:
        self.stream.write(s)
        return self.copy.write(s)

    def flush(self) -> None:
        self.stream.flush()


def run_part(name: str, argv: list[str], tmp: Path) -> dict:
    """Run one part's main with `--out`; -> {json, markdown} or {error, markdown}."""
    out = tmp / f"{name}.json"
    tee = Tee(sys.stdout)
    print(f"\n== {name} {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        with contextlib.redirect_stdout(tee):
            importlib.import_module(f"benchmarks.{name}").main([*argv, "--out", str(out)])
        return dict(json=json.loads(out.read_text()), markdown=tee.copy.getvalue().strip())
    except (Exception, SystemExit) as e:  # one part failing leaves the others to run
        traceback.print_exc()
        return dict(error=f"{type(e).__name__}: {e}", markdown=tee.copy.getvalue().strip())


# --- targets ---------------------------------------------------------------------------------------------


def target(name: str, measured: float | None, threshold: float, *, percent: bool = False,
           refused: str | None = None) -> dict:
    """One row of the targets table; `measured` None = the part did not produce it; `refused`: why the
    measured figure is not a result (a round that was not quiet, a bound a contender beat)."""
    status = "not a result" if refused else "not measured" if measured is None else \
        "met" if measured >= threshold else "not met"
    return dict(target=name, measured=measured, threshold=threshold, percent=percent, status=status,
                refused=refused)


def refusal(*rows: dict) -> str | None:
    """`quiet.refusal` over the rounds of result rows that carry them (`contender`, `rounds`)."""
    return quiet.refusal({r.get("contender", str(i)): quiet.rounds_of(r) for i, r in enumerate(rows)})


def train_targets(report: dict | None) -> list[dict]:
    """Our training tokens/s over each Hugging Face contender's (threshold by its attention code), and MFU."""
    rows = []
    for family in (report or {}).get("results", []):
        ours = family["rows"][0]
        for r in family["rows"][1:]:
            kind = r.get("attention", "").removeprefix("HF ")
            if r.get("attention", "").startswith("HF ") and kind in TRAIN_THRESHOLDS:
                label = r["contender"] if kind in r["contender"] else f"{r['contender']} ({kind})"
                rows.append(target(f"training {family['family']}: tformer / {label}",
                                   ours["tokens_per_s"] / r["tokens_per_s"], TRAIN_THRESHOLDS[kind],
                                   refused=refusal(ours, r)))
        rows.append(target(f"training {family['family']}: tformer MFU", ours["mfu"], MFU_TARGET, percent=True,
                           refused=refusal(ours)))
    return rows or [target("training: tformer / HF default (eager)", None, TRAIN_THRESHOLDS["eager"]),
                    target("training: tformer / HF SDPA", None, TRAIN_THRESHOLDS["sdpa"]),
                    target("training: tformer MFU", None, MFU_TARGET, percent=True)]


def generate_targets(report: dict | None) -> list[dict]:
    """Batch-1 generation: our tokens/s over transformers', and over the bandwidth bound."""
    rows = {r["contender"]: r for r in (report or {}).get("results", []) if r["batch"] == 1}
    ours, theirs = rows.get("tformer"), rows.get("transformers")
    bound = (report or {}).get("bound") or {}
    return [target("generation, batch 1: tformer / transformers",
                   ours["tokens_per_s"] / theirs["tokens_per_s"] if ours and theirs else None, 2.0,
                   refused=refusal(ours, theirs) if ours and theirs else None),
            target("generation, batch 1: tformer / bandwidth bound",
                   ours["tokens_per_s"] / bound["tokens_per_s"] if ours and bound.get("tokens_per_s") else None,
                   0.7, percent=True, refused=bound.get("mismeasured") or (refusal(ours) if ours else None))]


def translate_targets(report: dict | None) -> list[dict]:
    """Beam-search translation: our sentences/s over Marian's."""
    beam = (report or {}).get("args", {}).get("beam", 4)
    ours = [r for r in (report or {}).get("results", []) if r["search"] == f"beam{beam}" and "speedup" in r]
    return [target(f"translation, beam {beam}: tformer / MarianMTModel",
                   ours[0]["speedup"] if ours else None, 2.0, refused=ours[0].get("refused") if ours else None)]


def ct2_targets(report: dict | None) -> list[dict]:
    """Issue 30: ours at least as fast as CTranslate2 run as its users run it, on each of its rows (each
    engine's default stopping rule), fp32 against fp32 and int8 against int8; and batch-1 generation at 85%
    of the bandwidth bound measured in the same run."""
    rows = {r["task"]: r for r in (report or {}).get("results", [])}
    names = ("translation, greedy", "translation, beam 4", "generation, batch 1", "generation, batch 8")
    found = {n: next((r for task, r in rows.items() if task.startswith(n + ",")), None) for n in names}
    bound = (report or {}).get("bound") or {}
    gen1 = found["generation, batch 1"]
    share_refused = bound.get("mismeasured") or (gen1 or {}).get("refused", {}).get("fp32")
    return [target(f"{n}: tformer {q} / CTranslate2 {q}", r[f"{q}_ratio"] if r else None, 1.0,
                   refused=(r.get("refused") or {}).get(q) if r else None)
            for q in ("fp32", "int8") for n, r in found.items()] + [
        target("generation, batch 1: tformer fp32 / bandwidth bound", bound.get("tformer_share"), 0.85,
               percent=True, refused=share_refused)]


def targets(parts: dict[str, dict]) -> list[dict]:
    """Every target row from the parts' JSON (a part missing or failed gives 'not measured' rows)."""
    def report(name: str) -> dict | None:
        return parts.get(name, {}).get("json")

    return (train_targets(report("train_speed")) + generate_targets(report("generate"))
            + translate_targets(report("translate_speed")) + ct2_targets(report("ct2_speed")))


def targets_markdown(rows: list[dict]) -> str:
    def fmt(x: float | None, percent: bool) -> str:
        return "—" if x is None else f"{100 * x:.1f}%" if percent else f"{x:.2f}x"

    lines = ["| target | measured | needed | status |", "|---|---:|---:|---|"]
    lines += [f"| {r['target']} | {fmt(r['measured'], r['percent'])} | ≥ {fmt(r['threshold'], r['percent'])} | "
              f"{r['status']} |" for r in rows]
    lines += [f"\n{r['target']}: {r['refused']}" for r in rows if r.get("refused")]
    return "\n".join(lines)


# --- the report ------------------------------------------------------------------------------------------


def readme(info: dict) -> str:
    m, lim = info["machine"], info["limits"]
    lines = ["# Benchmarks", "",
             f"Measured {info['date']} by `make bench` (benchmarks/bench.py{' --quick' if info['quick'] else ''})."]
    if info["quick"]:
        lines += ["", "**A --quick smoke run: tiny models, one repetition. These numbers mean nothing.**"]
    lines += ["", "## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in m.items()]
    if lim:
        lines += [f"| fp32 matmul | {lim['matmul_gflops']:.1f} GFLOP/s |",
                  f"| copy bandwidth (read + write) | {lim['bandwidth_gb_s']:.1f} GB/s |",
                  f"| mat-vec bandwidth | {lim['matvec_gb_s']:.1f} GB/s |"]
        if "read_gb_s" in lim:
            lines.append(f"| streaming read (best kernel, best call) | {lim['read_gb_s']:.1f} GB/s |")
    lines += ["", "## Targets", "", targets_markdown(info["targets"]), "",
              "Training thresholds by the Hugging Face model's attention code: 1.5x over its eager attention "
              "(\"HF default\"), 1.1x over its SDPA; MFU against the fp32 matmul rate train_speed measures "
              "just before its contenders (in its section). Generation: batch 1, "
              "against transformers' generate and against weight bytes / streaming-read bandwidth. Translation: beam "
              "search against MarianMTModel.generate, the same weights and settings. CTranslate2: speed (its "
              "seconds over ours) on the same weights, int8 against int8 (issue 20). torch.compile: one "
              "generation row (`tformer compiled`, its compiling first call apart)."]
    for name in PARTS:
        part = info["parts"].get(name)
        if part is None:
            continue
        lines += ["", f"## {TITLES[name]}", "", f"`{' '.join(part['argv']) or '(defaults)'}`", ""]
        if "error" in part:
            lines += [f"**Failed:** `{part['error']}`", ""]
        lines.append(part["markdown"] or "(no output)")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", type=device_arg, default="auto")
    p.add_argument("--out-dir", type=Path, default=None, help="default docs/bench (quick: runs/bench-quick)")
    p.add_argument("--skip", nargs="+", choices=PARTS, default=[], help="parts not to run")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the whole pipeline")
    args = p.parse_args(argv)
    if args.out_dir is None:
        args.out_dir = Path("runs/bench-quick" if args.quick else "docs/bench")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    size = dict(n=256, mib=8, reps=3) if args.quick else {}
    print("== machine", file=sys.stderr, flush=True)
    info = dict(date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"), quick=args.quick,
                device=args.device, machine=machine.describe(args.device),
                limits=machine.limits(args.device, **size), parts={})
    with tempfile.TemporaryDirectory() as tmp:
        for name in PARTS:
            if name in args.skip:
                continue
            argv_part = ["--device", args.device] + (QUICK_ARGS[name] if args.quick else FULL_ARGS.get(name, []))
            info["parts"][name] = dict(argv=argv_part, **run_part(name, argv_part, Path(tmp)))
    info["targets"] = targets(info["parts"])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "results.json").write_text(json.dumps(info, indent=2) + "\n")
    (args.out_dir / "README.md").write_text(readme(info))
    print("\n" + targets_markdown(info["targets"]))
    print(f"\nwrote {args.out_dir}/results.json and README.md", file=sys.stderr)
    return info


if __name__ == "__main__":
    main()
