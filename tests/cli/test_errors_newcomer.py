"""The bad-input catalogue (docs/errors.md), a newcomer's second hour: a setting spelt as an option or given
by its name alone is shown the override it likely means; a file given to translate as an argument is shown
-i; `--resume` says where it resumes and refuses to change unasked what the run was made with, or to
train a finished run for no step; another program's model given as a checkpoint is named; a checkpoint
averaged with itself is refused. Each case through `tformer.cli.main` gives one line and exit 2, and
leaves the disk as it was (catalogue.run_case). Also: what `train` says of a short run (its --help, the
budget line, a progress line without a bar)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from catalogue import Case, Ctx, World, in_catalogue, run_case, translate

from tformer.cli import main
from tformer.training import progress
from tformer.training.config import TrainConfig
from tformer.training.loop import budget_line


def trained(c: Ctx, *overrides: str) -> None:
    """{tmp}/run: a real run of the catalogue's recipe (two steps unless `overrides` say otherwise)."""
    assert main(c.train(*overrides)) == 0


def resumed(c: Ctx, made: tuple[str, ...], now: tuple[str, ...]) -> list[str]:
    trained(c, *made)
    return c.train(*now, "--resume")


def ct2_export(c: Ctx) -> list[str]:
    assert main(["convert", "--to-ct2", str(c.w.s2s), "--out", f"{c.tmp}/ct2"]) == 0
    return translate(c, "-i", c.file("in.txt", "the cat\n"), checkpoint=c.tmp / "ct2")


def hf_model(c: Ctx) -> list[str]:
    shutil.copytree(c.w.hf, c.tmp / "hf")
    return ["generate", "--checkpoint", f"{c.tmp}/hf", "--prompt", "In"]


def best_and_last(c: Ctx) -> list[str]:
    trained(c)  # its one evaluation, at its last step, was its best: best/ and last/ hold the same weights
    return ["average", f"{c.tmp}/run/best", f"{c.tmp}/run/last", "--out", f"{c.tmp}/avg"]


SPENT = ("train.max_steps=100000", "train.eval_every=100000", "train.time_budget_min=0.0002")  # 12 ms: a step or two

CASES = [
    Case("setting-spelt-as-an-option", lambda c: c.train("--time-budget", "2"),
         ("unrecognized arguments: --time-budget 2; a recipe's settings are key=value overrides: did you mean "
          "train.time_budget_min=2?",)),
    Case("setting-spelt-as-an-option-demo", lambda c: ["demo", str(c.w.recipe), "--max-steps=3"],
         ("unrecognized arguments: --max-steps=3; a recipe's settings are key=value overrides: did you mean "
          "train.max_steps=3?",)),
    Case("setting-by-its-name-alone", lambda c: c.train("time_budget_min=2"),
         ("unknown config key 'time_budget_min'; did you mean 'train.time_budget_min'? known keys: data",)),
    Case("translate-file-as-an-argument", lambda c: translate(c, c.file("s.en", "the cat\n")),
         ("unrecognized arguments: {tmp}/s.en; give the input as -i {tmp}/s.en or < {tmp}/s.en",)),
    Case("resume-changes-a-setting-unasked",
         lambda c: resumed(c, ("train.max_steps=3", "train.eval_every=3"), ("train.eval_every=3",)),
         ("cannot resume {tmp}/run as given: the run was made with train.max_steps=3, and this command would "
          "continue it with train.max_steps=2; give train.max_steps=3 to continue it as it was made, or the new "
          "value to change it",)),
    Case("resume-a-finished-run", lambda c: resumed(c, (), ()),
         ("{tmp}/run is finished: it reached step 2, its train.max_steps; to train on, give a larger one, e.g. "
          "train.max_steps=4",)),
    Case("resume-a-run-whose-budget-is-spent", lambda c: resumed(c, SPENT, SPENT),
         ("{tmp}/run is finished: it stopped at step ", "its time budget (train.time_budget_min=0.0002) spent; "
          "to train on, give a larger one, e.g. train.time_budget_min=0.0004",)),
    Case("ct2-model-as-checkpoint", ct2_export,
         ("{tmp}/ct2 is a CTranslate2 model (model.bin); tformer reads its own checkpoints, or Hugging Face ones "
          "converted with tformer convert --from-hf DIR --out CHECKPOINT",)),
    Case("hugging-face-model-as-checkpoint", hf_model,
         ("{tmp}/hf is a Hugging Face model (config.json); convert it first: tformer convert --from-hf {tmp}/hf "
          "--out CHECKPOINT",)),
    Case("average-a-checkpoint-with-itself", best_and_last,
         ("{tmp}/run/best and {tmp}/run/last are the same checkpoint (the same weights, step 2): an average would "
          "count it twice",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world: World, tmp_path: Path, capsys: pytest.CaptureFixture,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, Ctx(world, tmp_path, monkeypatch), capsys)


def test_every_case_is_in_the_catalogue() -> None:
    assert in_catalogue(CASES) == []


def test_an_unknown_option_like_no_setting_gets_no_guess(world: World, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    assert main(["train", str(world.recipe), "--bogus", "--no-progress"]) == 2
    assert capsys.readouterr().err == "tformer: error: unrecognized arguments: --bogus\n"


def test_train_help_says_how_to_shorten_a_run(capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "train.time_budget_min=2" in text and "train.max_steps=500" in text
    assert "the set-up before the first step, reading the data and building the tokenizer, is not counted" in text


def test_the_budget_line_says_what_counts() -> None:
    assert budget_line(0, TrainConfig(max_steps=100)) == "training from step 0 until step 100 (train.max_steps)"
    line = budget_line(40, TrainConfig(max_steps=100, time_budget_min=2.0))
    assert line == ("training from step 40 until step 100 (train.max_steps) or 2 min (train.time_budget_min; the "
                    "clock runs from the first step and counts the evaluations, not the set-up before it)")


def test_without_a_bar_a_progress_line_comes_now_and_then(world: World, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped (no terminal, or --no-progress): the budget line, then a line after the first step and at most
    every LINE_EVERY_S seconds (0 here: every step); each says the step, the minutes and the loss."""
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    assert main(["train", str(world.recipe), f"out_dir={tmp_path}/run", "train.max_steps=3", "train.eval_every=3",
                 "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "training from step 0 until step 3 (train.max_steps)"
    steps = [line for line in lines if line.startswith("step ") and " of 3 (" in line]
    assert [line.split(" (")[0] for line in steps] == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert all(" min): loss " in line and ", lr " in line for line in steps)


def test_a_progress_line_shows_the_budget_and_only_without_a_bar() -> None:
    state = {"step": 7, "elapsed": 30.0}
    lines = progress.ProgressBar(state, max_steps=100, budget_min=2.0, enabled=False, lines=True)
    assert lines.line(state, loss=1.23456, lr=1e-3) == "step 7 (0.5 of 2 min): loss 1.235, lr 1.00e-03"
    assert progress.ProgressBar(state, max_steps=100, budget_min=None, enabled=False, lines=True).line(
        state, loss=1.0, lr=1e-3) == "step 7 of 100 (0.5 min): loss 1.000, lr 1.00e-03"
    assert not progress.ProgressBar(state, max_steps=100, budget_min=None, enabled=True, lines=True).lines


def test_a_resumed_run_says_where_it_resumes_and_how_the_run_was_made(world: World, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    run = ["train", str(world.recipe), f"out_dir={tmp_path}/run", "train.eval_every=1", "--no-progress"]
    assert main(run) == 0
    capsys.readouterr()
    assert main([*run, "train.max_steps=3", "--resume"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"resuming {tmp_path}/run at step 2 (of the run made with out_dir={tmp_path}/run " \
                       "train.eval_every=1)"
    assert "training from step 2 until step 3 (train.max_steps)" in lines
