"""The bad-input catalogue (docs/errors.md), round two: lost or corrupted work. A fresh training (or demo)
into a directory that holds a run, without --resume or --overwrite; both flags at once; a conversion whose
--out is a directory of the user's own files: each gives one line and exit 2 (catalogue.run_case), and
nothing on disk changes. The lock, --overwrite and the recovery of a save a crash interrupted are tested in
tests/training/test_rundir.py and tests/training/test_crash_safety.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import Case, Ctx, World, case_tests


def a_run(c: Ctx, *parts: str) -> None:
    """{tmp}/run holding the parts of a finished run: "last", "best", "log"."""
    for part in parts:
        if part == "log":
            c.file("run/metrics.jsonl", '{"step": 1, "loss": 3.0}\n')
        else:
            c.copy(c.w.s2s, f"run/{part}")
    c.file("run/recipe.yaml", Path(c.w.recipe).read_text())


def over_a_run(c: Ctx, *parts: str, lm: bool = False) -> list[str]:
    a_run(c, *parts)
    return c.lm() if lm else c.train()


def user_dir(c: Ctx) -> str:
    """{tmp}/out: a directory of the user's own files."""
    c.file("out/notes.txt", "mine")
    c.file("out/sub/data.csv", "1,2\n")
    return str(c.tmp / "out")


CASES = [
    # 18: a fresh run over an existing one (best/ replaced by a 1-step model, metrics.jsonl cut, silently)
    Case("train-over-a-run", lambda c: over_a_run(c, "last", "best", "log"),
         ("{tmp}/run already holds a run (best/, last/, metrics.jsonl); continue it with --resume, replace it with "
          "--overwrite, or choose another out_dir",)),
    Case("train-over-a-run-best-only", lambda c: over_a_run(c, "best"),
         ("{tmp}/run already holds a run (best/)",)),
    Case("train-over-a-log-only", lambda c: over_a_run(c, "log"),
         ("{tmp}/run already holds a run (metrics.jsonl)",)),
    Case("lm-over-a-run", lambda c: over_a_run(c, "last", lm=True), ("{tmp}/run already holds a run (last/)",)),
    Case("demo-over-a-run", lambda c: (a_run(c, "last"), ["demo", str(c.w.recipe), f"out_dir={c.tmp}/run"])[1],
         ("{tmp}/run already holds a run (last/)",)),
    Case("train-resume-and-overwrite", lambda c: c.train("--resume", "--overwrite"),
         ("argument --overwrite: not allowed with argument --resume",)),
    # 20: convert --out a directory of the user's files (they were deleted and replaced, exit 0)
    Case("convert-from-hf-into-a-user-directory", lambda c: ["convert", "--from-hf", str(c.w.hf), "--out", user_dir(c)],
         ("{tmp}/out is a directory of other files, not a checkpoint; a checkpoint replaces only a checkpoint",)),
    Case("convert-to-hf-into-a-user-directory", lambda c: ["convert", "--to-hf", str(c.w.gpt), "--out", user_dir(c)],
         ("{tmp}/out is a directory of other files (no config.json: not a Hugging Face model)",)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)




def test_overwrite_replaces_the_run_and_keeps_the_users_files(world: World, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tformer.cli import main

    c = Ctx(world, tmp_path, monkeypatch)
    a_run(c, "last", "log")
    c.file("run/notes.txt", "mine")
    assert main(c.train("train.max_steps=1", "--overwrite")) == 0
    run = tmp_path / "run"
    assert (run / "notes.txt").read_text() == "mine" and not (run / ".lock").exists()
    assert [line for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line][-1].startswith(
        '{"step": 1,')
