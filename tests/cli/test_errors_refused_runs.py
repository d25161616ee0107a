"""The bad-input catalogue (docs/errors.md), round three: a training refused after its setup. What can be checked
before the run directory exists is checked there (the model's context against the longest pair, a data.max_len
that drops every pair, the test split `demo` or a classifier scores at the end); and a run stopped by a refusal
at its first step, before it logged a step or saved a checkpoint, takes back what it wrote
(`training.rundir.hold`): a directory it created goes, a directory that was there stays with everything it held,
and a refused --resume leaves the run byte for byte. Each case through `tformer.cli.main` returns 2 and prints
one line, with no traceback, and leaves the disk as it was (catalogue.run_case); the refusals at the first step
are simulated (a task's loss raising the UserError that any check there would raise), since every refusal known
is now made before the directory exists. What the property tests found is in test_errors_fuzzed.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from catalogue import TINY, Case, Ctx, World, case_tests, pairs, recipe_file, tsv

from tformer.cli import main
from tformer.errors import UserError

REFUSAL = "refused at the first step (a stand-in for any check made there)"


def refused_at_the_first_step(c: Ctx, task: str = "translation") -> None:
    """The task's loss raises a UserError: the first step refuses the run, after recipe.yaml and metrics.jsonl
    were written."""
    from tformer.tasks.lm import LMTask
    from tformer.tasks.translation import TranslationTask

    def refuse(self: object, model: object, batch: object) -> None:
        raise UserError(REFUSAL)

    c.monkeypatch.setattr(TranslationTask if task == "translation" else LMTask, "loss", refuse)


def first_step(c: Ctx, *overrides: str, task: str = "translation") -> list[str]:
    refused_at_the_first_step(c, task)
    return c.train(*overrides) if task == "translation" else c.lm(*overrides)


def users_directory(c: Ctx) -> list[str]:
    """{tmp}/run: the user's own files, a recipe.yaml among them (the loop writes its own over it)."""
    c.file("run/notes.txt", "mine")
    c.file("run/recipe.yaml", "# my recipe, kept here\ntask: translation\n")
    c.file("run/data/train.tsv", "a\tb\n")
    return first_step(c)


def a_run(c: Ctx) -> None:
    """{tmp}/run: a finished run (last, best, a log, recipe.yaml) and a file of the user's."""
    for part in ("last", "best"):
        c.copy(c.w.s2s, f"run/{part}")
    c.file("run/metrics.jsonl", '{"step": 1, "loss": 3.0}\n')
    c.file("run/recipe.yaml", Path(c.w.recipe).read_text())
    c.file("run/notes.txt", "mine")


def overwrite_refused(c: Ctx, *overrides: str) -> list[str]:
    a_run(c)
    return c.train(*overrides, "--overwrite")


def trained(c: Ctx) -> None:
    """{tmp}/run: a real two-step run of the catalogue's recipe, to resume."""
    assert main(c.train()) == 0


def resume_refused_at_the_first_step(c: Ctx) -> list[str]:
    trained(c)
    with open(c.tmp / "run" / "metrics.jsonl", "a") as log:  # a record past `last`, as a crash leaves: trimmed
        log.write('{"step": 3, "loss": 1.0}\n')
    refused_at_the_first_step(c)
    return c.train("train.max_steps=4", "--resume")  # max_steps may change: recipe.yaml is rewritten, then undone


def resume_refused_in_setup(c: Ctx, *overrides: str) -> list[str]:
    trained(c)
    return c.train(*overrides, "--resume")


def without_a_compiler(c: Ctx) -> list[str]:
    """train.compile=true where inductor finds no C++ compiler (a slim container): torch's search raising what
    it raises then (tests/training/test_compiling.py runs the search itself)."""
    from torch._inductor import cpp_builder, exc

    def search() -> str:
        raise exc.InvalidCxxCompiler

    c.monkeypatch.setattr(cpp_builder, "get_cpp_compiler", search)
    return c.train("train.compile=true")


def classifier(c: Ctx, **data: object) -> list[str]:
    rows = [("pos" if i % 2 else "neg", s) for i, (s, _) in enumerate(pairs(40, 0))]
    train = tsv(c.tmp / "clf.tsv", rows)
    recipe = {"task": "classify",
              "data": {"corpus": "files", "train": str(train), "valid": str(train), "vocab_size": 100, **data},
              "model": {"preset": "bert-tiny", "overrides": dict(TINY)}, "train": {"max_steps": 2}}
    return recipe_file(c, "clf.yaml", yaml.safe_dump(recipe))


def pretraining(c: Ctx, **overrides: object) -> list[str]:
    docs = c.file("docs.txt", "\n\n".join("\n".join(" ".join(p) for p in pairs(6, seed)) for seed in range(8)))
    recipe = {"task": "bert", "data": {"corpora": ["files"], "paths": [docs], "valid_paths": [docs],
                                       "vocab_size": 100, "max_len": 32, "batch_size": 8},
              "model": {"preset": "bert-tiny", "overrides": {**TINY, **overrides}}, "train": {"max_steps": 2}}
    return recipe_file(c, "bert.yaml", yaml.safe_dump(recipe))


CASES = [
    # checked before the run directory exists (the pair that did not fit failed at the first step; a data.max_len
    # that dropped every pair was an IndexError at the first batch)
    Case("train-context-shorter-than-a-pair", lambda c: c.train("model.overrides.max_len=16"),
         ("the model's max_len=16 is shorter than the longest training or validation pair (22 positions, <s> "
          "included); raise model.overrides.max_len to 22, or lower data.max_len=128 to 16",)),
    Case("train-context-of-one", lambda c: c.train("model.overrides.max_len=1"),
         ("the model's max_len=1 is shorter than the longest training or validation pair (22 positions, <s> "
          "included); raise model.overrides.max_len to 22",)),
    Case("train-max-len-drops-every-pair", lambda c: c.train("data.max_len=2"),
         ("data.max_len=2 drops every training pair (all 60 are longer; the shortest takes 3 positions, <s> "
          "included); raise data.max_len",)),
    Case("lm-context-below-the-block", lambda c: c.lm("model.overrides.max_len=8"),
         ("model.overrides.max_len=8 is below data.block_size=16",)),
    Case("classify-context-below-the-data", lambda c: classifier(c, max_len=64),
         ("data.max_len=64 exceeds the model's max_len=32",)),
    Case("classify-test-split-missing", lambda c: classifier(c, test=f"{c.tmp}/missing.tsv"),
         ("{tmp}/missing.tsv: no such file",)),
    Case("bert-context-below-the-data", lambda c: pretraining(c, max_len=16),
         ("model max_len=16 is below data.max_len=32",)),
    Case("train-compile-without-a-compiler", without_a_compiler,
         ("train.compile=true cannot run on cpu: inductor builds the CPU step with a C++ compiler and found none "
          "(No working C++ compiler found in torch._inductor.config.cpp.cxx",
          "; install it, or set train.compile=false")),
    Case("demo-without-a-test-split", lambda c: ["demo", str(c.w.recipe), f"out_dir={c.tmp}/run"],
         ("data.test is not set; give a .tsv, .jsonl or 'src_file,tgt_file' path",)),
    # refused at the first step: what the run wrote is taken back
    Case("train-refused-at-the-first-step", lambda c: first_step(c), (REFUSAL,)),
    Case("train-refused-at-the-first-step-in-new-folders", lambda c: first_step(c, f"out_dir={c.tmp}/a/b/run"),
         (REFUSAL,)),
    Case("train-refused-at-the-first-step-in-a-users-directory", users_directory, (REFUSAL,)),
    Case("lm-refused-at-the-first-step", lambda c: first_step(c, task="lm"), (REFUSAL,)),
    # an old run: --overwrite refused before it clears anything; --resume refused leaves it byte for byte
    Case("overwrite-refused-keeps-the-old-run", lambda c: overwrite_refused(c, "model.overrides.max_len=16"),
         ("the model's max_len=16 is shorter than the longest training or validation pair",)),
    Case("resume-refused-in-setup-keeps-the-run", lambda c: resume_refused_in_setup(c, "data.max_len=2"),
         ("cannot resume {tmp}/run/last with a changed recipe (data.max_len 128 -> 2)",)),
    Case("resume-refused-at-the-first-step-keeps-the-run", resume_refused_at_the_first_step, (REFUSAL,)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)


def test_the_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


# --- where the right result is not "as before" ---------------------------------------------------------------


def test_overwrite_refused_at_the_first_step_keeps_the_directory_and_the_users_files(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """--overwrite replaces the old run before the first step (what it was asked to do), so a refusal there
    leaves no run at all; but the directory, which was there, stays, with the user's files in it."""
    c = Ctx(world, tmp_path, monkeypatch)
    a_run(c)
    refused_at_the_first_step(c)
    assert main(c.train("--overwrite")) == 2
    assert capsys.readouterr().err == f"tformer: error: {REFUSAL}\n"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


def test_a_refusal_after_a_logged_step_keeps_the_run(world: World, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    """A run that logged a step has something to keep: a diverged run stops with exit 2 and keeps its log."""
    argv = ["train", str(world.recipe), f"out_dir={tmp_path}/run", "train.optim.lr=1e30", "train.max_bad_steps=1",
            "--no-progress"]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("tformer: error: stopping at step ")
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count('"skipped"') == 1
    assert (tmp_path / "run" / "recipe.yaml").is_file()


def test_a_refused_run_can_be_run_again_once_fixed(world: World, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a refused run wrote blocks the next: the same command, fixed, trains without --overwrite."""
    c = Ctx(world, tmp_path, monkeypatch)
    assert main(first_step(c)) == 2
    monkeypatch.undo()
    assert main(c.train()) == 0 and (tmp_path / "run" / "last").is_dir()
