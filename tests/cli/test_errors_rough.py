"""The bad-input catalogue (docs/errors.md), issue 32: a newcomer's rough edges. A run directory named where a
checkpoint is meant gets the checkpoint it most likely meant, from every command that reads one; `train` and
`demo` take their options and `key=value` overrides in any order, and without a CONFIG name only it as
required. Each case through `tformer.cli.main` gives one line and exit 2, and leaves the disk as it was
(catalogue.run_case)."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import Case, Ctx, World, case_tests

from tformer.cli import build_parser, main


def run_directory(c: Ctx, *checkpoints: str) -> str:
    """{tmp}/runs/tiny holding the translator as each of `checkpoints` (best, last), with its recipe; returns
    the run directory."""
    for name in checkpoints:
        c.copy(c.w.s2s, f"runs/tiny/{name}")
    c.file("runs/tiny/recipe.yaml", Path(c.w.recipe).read_text())
    return str(c.tmp / "runs" / "tiny")


def text(c: Ctx) -> str:
    return c.file("in.txt", "the cat\n")


# every command that reads a checkpoint, given the run directory in its place
COMMANDS = {
    "translate": lambda c, run: ["translate", "--checkpoint", run, "-i", text(c)],
    "evaluate": lambda c, run: ["evaluate", "--checkpoint", run],
    "generate": lambda c, run: ["generate", "--checkpoint", run, "--prompt", "In"],
    "score": lambda c, run: ["score", "--checkpoint", run, text(c)],
    "classify": lambda c, run: ["classify", "--checkpoint", run, "-i", text(c)],
    "plot-attention": lambda c, run: ["plot", "attention", "--checkpoint", run, "--text", "the cat",
                                      "-o", str(c.tmp / "a.png")],
    "serve": lambda c, run: ["serve", "--checkpoint", run, "--port", "0"],
    "convert-to-hf": lambda c, run: ["convert", "--to-hf", run, "--out", str(c.tmp / "hf")],
    "convert-to-ct2": lambda c, run: ["convert", "--to-ct2", run, "--out", str(c.tmp / "ct2")],
    "average": lambda c, run: ["average", run, f"{run}/best", "--out", str(c.tmp / "avg")],
}


def best_meant(command: str) -> Case:
    return Case(f"run-directory-as-checkpoint-{command}",
                lambda c: COMMANDS[command](c, run_directory(c, "best", "last")),
                ("checkpoint {tmp}/runs/tiny: missing config.yaml; {tmp}/runs/tiny is a run directory: did you "
                 "mean {tmp}/runs/tiny/best?",))


CASES = [
    *(best_meant(command) for command in COMMANDS),
    Case("run-directory-with-only-last-as-checkpoint",
         lambda c: COMMANDS["translate"](c, run_directory(c, "last")),
         ("checkpoint {tmp}/runs/tiny: missing config.yaml; {tmp}/runs/tiny is a run directory: did you mean "
          "{tmp}/runs/tiny/last?",)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)


def test_a_directory_that_is_no_run_gets_no_guess(world: World, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["generate", "--checkpoint", str(tmp_path / "empty"), "--prompt", "In"]) == 2
    assert capsys.readouterr().err == f"tformer: error: checkpoint {tmp_path / 'empty'}: missing config.yaml\n"


@pytest.mark.parametrize("command", ["train", "demo"])
def test_without_a_config_only_the_config_is_required(command: str, capsys: pytest.CaptureFixture) -> None:
    """The overrides are optional: argparse named them required too ("config, overrides")."""
    assert main([command]) == 2
    assert capsys.readouterr().err == "tformer: error: the following arguments are required: config\n"
    assert main([command, "--overwrite"]) == 2
    assert capsys.readouterr().err == "tformer: error: the following arguments are required: config\n"


@pytest.mark.parametrize("argv", [
    ["train", "demo", "--resume", "out_dir=runs/x", "train.max_steps=5"],
    ["train", "--resume", "demo", "out_dir=runs/x", "--no-progress", "train.max_steps=5"],
    ["train", "demo", "out_dir=runs/x", "train.max_steps=5", "--resume"],
    ["demo", "demo", "--overwrite", "out_dir=runs/x", "train.max_steps=5", "--no-progress"],
])
def test_options_and_overrides_come_in_any_order(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.config == "demo" and args.overrides == ["out_dir=runs/x", "train.max_steps=5"]
    assert args.resume if argv[0] == "train" else args.overwrite


def test_an_unknown_option_among_the_overrides_is_still_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "demo", "out_dir=runs/x", "--bogus"]) == 2
    assert capsys.readouterr().err == "tformer: error: unrecognized arguments: --bogus\n"
