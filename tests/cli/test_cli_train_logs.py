"""What `tformer train` tells a person: the model's size and training FLOPs per token at the start, each
evaluation's metrics as a line on stdout when there is no progress bar (a batch job), and TensorBoard event
files only when asked for (`--tensorboard`, `train.tensorboard: true`), holding what metrics.jsonl holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalogue import World
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tformer.cli import main


def train(world: World, out: Path, *extra: str) -> list[str]:
    return ["train", str(world.recipe), f"out_dir={out}", "train.max_steps=4", "train.eval_every=2",
            "train.log_every=1", *extra]


def test_train_prints_the_model_and_each_evaluation(world: World, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    assert main(train(world, tmp_path / "run", "--no-progress")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("model: ") and "parameters (" in lines[0]
    assert "training FLOPs per token at context 32" in lines[0]
    evals = [line for line in lines if line.startswith("eval step ")]
    assert [e.split(" (")[0] for e in evals] == ["eval step 2", "eval step 4"]
    assert all("valid_loss " in e and "bleu " in e and "chrf " in e for e in evals)
    assert not (tmp_path / "run" / "tensorboard").exists()  # not asked for


def test_tensorboard_events_hold_the_logged_scalars(world: World, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert main(train(world, run, "--no-progress", "--tensorboard")) == 0
    files = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "eval/valid_loss", "eval/bleu"} <= tags
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in logged if "loss" in r}
    assert {e.step: e.value for e in events.Scalars("loss")} == pytest.approx(losses)
    assert [e.step for e in events.Scalars("eval/valid_loss")] == [2, 4]


def test_a_resumed_run_adds_to_the_same_tensorboard_scalars_once(world: World, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(train(world, run, "--no-progress", "--tensorboard")) == 0
    assert main(train(world, run, "train.max_steps=6", "--no-progress", "--tensorboard", "--resume")) == 0
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [1, 2, 3, 4, 5, 6]
    assert [e.step for e in events.Scalars("eval/valid_loss")] == [2, 4, 6]
