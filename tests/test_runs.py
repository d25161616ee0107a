"""runs.py: a run directory's names, the run of a checkpoint, and the one reader of the run's recipe (every
problem with it one line naming the file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tformer.errors import UserError
from tformer.inference import DecodeConfig
from tformer.runs import RUN_FILES, RunDir, is_checkpoint_name


def test_names() -> None:
    run = RunDir("runs/demo")
    assert run.path == Path("runs/demo")
    assert (run.recipe.name, run.metrics.name, run.samples.name) == ("recipe.yaml", "metrics.jsonl", "samples.txt")
    assert (run.last, run.best) == (Path("runs/demo/last"), Path("runs/demo/best"))
    assert run.preferred == (run.best, run.last)
    assert run.kept(120) == Path("runs/demo/step-00000120")
    assert (run.results("test").name, run.hypotheses("valid").name) == ("test.json", "valid.hyp")
    assert (run.evals.name, run.averaged.name, run.tensorboard.name, run.lock.name) == \
        ("evals", "averaged", "tensorboard", ".lock")


def test_run_files_are_its_names() -> None:
    run = RunDir(".")
    named = {run.recipe.name, run.metrics.name, run.samples.name}
    named |= {f(split).name for split in ("test", "valid") for f in (run.results, run.hypotheses)}
    assert set(RUN_FILES) == named
    assert all(is_checkpoint_name(n) for n in ("last", "best", run.kept(3).name))
    assert not any(is_checkpoint_name(n) for n in ("recipe.yaml", "lastly", "evals"))


def test_trained_is_best_else_last(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.trained() is None
    run.last.mkdir()
    assert run.trained() == run.last
    run.best.mkdir()
    assert run.trained() == run.best


def test_of_checkpoint_is_its_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert RunDir.of_checkpoint("runs/demo/best") == RunDir(tmp_path / "runs" / "demo")
    assert RunDir.of_checkpoint(Path("runs/demo/last/")).recipe == tmp_path / "runs" / "demo" / "recipe.yaml"


def test_a_recipe_written_reads_back(tmp_path: Path) -> None:
    @dataclass
    class Recipe:
        task: str = "translation"
        decode: DecodeConfig = field(default_factory=lambda: DecodeConfig(beam=3))

    run = RunDir(tmp_path)
    run.write_recipe(Recipe())
    assert run.read_recipe()["task"] == "translation"
    assert run.section("decode")["beam"] == 3
    assert run.settings(DecodeConfig, "decode") == DecodeConfig(beam=3)
    assert run.settings(Recipe) == Recipe()


def test_no_recipe_is_nothing_to_read(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.read_recipe() is None
    assert run.section("decode") == {}
    assert run.settings(DecodeConfig, "decode") is None


def test_an_empty_recipe_or_section_is_empty(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.recipe.write_text("")
    assert run.read_recipe() == {}
    run.recipe.write_text("decode:\n")
    assert run.section("decode") == {}
    assert run.settings(DecodeConfig, "decode") == DecodeConfig()


@pytest.mark.parametrize(("text", "reason"), [
    ("- a\n- b\n", "the file must hold a mapping of keys, not list"),
    ("decode: [1\n", "the file is not valid YAML"),
    ("task: a\ntask: b\n", "the file: key 'task' is given twice"),
])
def test_a_bad_recipe_is_one_line_naming_it(tmp_path: Path, text: str, reason: str) -> None:
    run = RunDir(tmp_path)
    run.recipe.write_text(text)
    for read in (run.read_recipe, lambda: run.section("decode"), lambda: run.settings(DecodeConfig, "decode")):
        with pytest.raises(UserError) as e:
            read()
        message = str(e.value)
        assert message.startswith(f"{run.recipe} (the run's recipe beside the checkpoint) is not a valid recipe: ")
        assert reason in message and "\n" not in message


def test_a_section_that_is_no_mapping_or_holds_a_bad_value(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.recipe.write_text("decode: 5\n")
    with pytest.raises(UserError, match=r"recipe\.yaml \(the run's recipe .*\) is not a valid recipe: decode: expected "
                                        "a mapping, got int$"):
        run.section("decode")
    run.recipe.write_text("decode: {beam: 0}\n")
    assert run.section("decode") == {"beam": 0}
    with pytest.raises(UserError, match=r"is not a valid recipe: decode\.beam=0 must be at least 1"):
        run.settings(DecodeConfig, "decode")
    run.recipe.write_text("decode: {bean: 2}\n")
    with pytest.raises(UserError, match=r"is not a valid recipe: unknown config key 'decode\.bean'; did you mean"):
        run.settings(DecodeConfig, "decode")
