"""SIGINT and SIGTERM during training (`training.interrupts`): the first is recorded, a second SIGINT goes to
the handler from before (stop at once) unless the stop's checkpoint is being written (`shielded`: ignored);
and through a real `tformer train`, Ctrl-C pressed three times ends with one line and exit code 130, never a
traceback (not from the loop, not from the way out)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harnesses import kill_resume
from tformer.training.interrupts import Interrupts


@pytest.fixture
def before() -> Iterator[list[int]]:
    """A SIGINT handler of this process's own that records what it is sent (restored afterwards)."""
    seen: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    yield seen
    signal.signal(signal.SIGINT, old)


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.01)  # the handler runs in this (the main) thread at its next instruction


def test_the_first_sigint_is_recorded_a_second_goes_to_the_handler_before(before: list[int]) -> None:
    with Interrupts() as stop:
        sigint()
        assert (stop.signal, before) == (signal.SIGINT, [])
        sigint()
        assert before == [signal.SIGINT]
    sigint()
    assert before == [signal.SIGINT] * 2  # restored on exit


def test_a_second_sigint_while_the_stop_is_saved_is_ignored(before: list[int]) -> None:
    with Interrupts() as stop:
        sigint()
        with stop.shielded():
            sigint()
            sigint()
        assert (stop.signal, before) == (signal.SIGINT, [])


def test_a_second_sigint_without_a_python_handler_before_raises_keyboard_interrupt() -> None:
    old = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        with pytest.raises(KeyboardInterrupt), Interrupts():
            sigint()
            sigint()
    finally:
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_three_times_during_training_is_one_line(tmp_path: Path) -> None:
    recipe = kill_resume.write_recipe(tmp_path, steps=500)
    out = tmp_path / "run"
    shutil.rmtree(out, ignore_errors=True)
    process = kill_resume.start(recipe, out, resume=False)
    while process.poll() is None and kill_resume.logged_step(out) < 2:
        time.sleep(0.002)
    for _ in range(3):
        process.send_signal(signal.SIGINT)
        time.sleep(0.002)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    # the stop saved its step (the second Ctrl-C came while it was saved), or the second stopped it at once
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0] == "tformer: interrupted" or lines[0].startswith("tformer: SIGINT at step"), err
