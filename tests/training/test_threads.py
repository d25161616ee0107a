"""train.threads and train.tune_threads: the tuner times each candidate thread count on real steps (one
warm-up step each, not counted), keeps the fastest, retimes every `every` steps and follows a change; the
training restores torch's thread count; bad values are refused by the recipe."""

from __future__ import annotations

import json

import pytest
import torch
from test_training_numerics import TinyLM, config, train_config

from tformer.models.presets import build_model
from tformer.training.config import TrainConfig
from tformer.training.loop import fit
from tformer.training.threads import ThreadTuner, candidates, training_threads


def test_candidates_are_the_count_and_the_powers_of_two_below() -> None:
    assert candidates(1) == [1]
    assert candidates(2) == [2, 1]
    assert candidates(6) == [6, 4, 2, 1]
    assert candidates(16) == [16, 8, 4, 2, 1]


class FakeMachine:
    """Seconds per step for each thread count (the warm-up step after a switch costs 100 s: never counted)."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.seconds, self.threads, self.switches = seconds, None, []

    def set_threads(self, n: int) -> None:
        self.threads = n
        self.switches.append(n)

    def run(self, tuner: ThreadTuner, steps: int) -> list[int]:
        used = []
        for _ in range(steps):
            before = self.threads
            tuner.before_step()
            used.append(tuner.threads)
            warm_up = self.threads != before
            tuner.after_step(600, 100.0 if warm_up else self.seconds[tuner.threads])
        return used


def test_the_tuner_keeps_the_fastest_count_and_follows_a_change() -> None:
    machine = FakeMachine({2: 0.4, 1: 0.25})  # busy: one thread is the faster
    tuner = ThreadTuner(2, every=20, probe=3, set_threads=machine.set_threads)
    used = machine.run(tuner, 8)  # the probe: 4 steps at 2 threads (1 warm-up), then 4 at 1
    assert used == [2, 2, 2, 2, 1, 1, 1, 1]
    assert tuner.best == 1 and tuner.rates() == pytest.approx({2: 600 / 0.4, 1: 600 / 0.25})
    assert machine.run(tuner, 20) == [1] * 20  # kept until the next probe
    machine.seconds = {2: 0.15, 1: 0.25}  # the machine is quiet again: two threads win the next probe
    assert machine.run(tuner, 8) == [2, 2, 2, 2, 1, 1, 1, 1]
    assert tuner.best == 2 and machine.run(tuner, 5) == [2] * 5


def test_one_core_has_nothing_to_tune() -> None:
    machine = FakeMachine({1: 0.3})
    tuner = ThreadTuner(1, every=2, probe=2, set_threads=machine.set_threads)
    assert machine.run(tuner, 10) == [1] * 10 and machine.switches == []


def test_the_tuner_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="most, every and probe >= 1"):
        ThreadTuner(0)


def test_training_threads_restores_torchs_count() -> None:
    before = torch.get_num_threads()
    with training_threads(1, False, on_cpu=True) as tuner:
        assert tuner is None and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with training_threads(None, True, on_cpu=True) as tuner:
        assert tuner is not None and tuner.candidates == candidates(before)
    with training_threads(None, True, on_cpu=False) as tuner:  # a GPU run: nothing to tune
        assert tuner is None
    assert torch.get_num_threads() == before


def test_a_tuned_training_logs_its_thread_count(tmp_path) -> None:  # noqa: ANN001
    before = torch.get_num_threads()
    model = build_model(config())
    state = fit(model, model.config, TinyLM([5, 7, 4, 6], per_batch=1), train_config(max_steps=6, tune_threads=True),
                out_dir=tmp_path, progress=False)
    assert state["step"] == 6
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    threads = [r["threads"] for r in logged if "loss" in r]
    assert len(threads) == 6 and set(threads) <= set(candidates(before))
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2, True, 1.5, "two", 1025, 100_000])
def test_the_recipe_refuses_a_bad_thread_count(bad) -> None:  # noqa: ANN001
    """100000 threads made OpenMP abort the process (no exception, no message): the count is bounded."""
    with pytest.raises(ValueError, match=rf"train.threads={bad!r} must be an integer in \[1, 1024\] or null"):
        TrainConfig(threads=bad)
