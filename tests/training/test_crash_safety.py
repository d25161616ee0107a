"""Crash safety, through real `python -m tformer train` processes: SIGKILL at 3 random steps with a resume
after each gives bitwise the weights of an uninterrupted run, and so does a SIGKILL at each moment of a save
(tests/harnesses/crash_in_save.py: files written, flushed, the old `last` moved aside, the new one in place, the
old one removed); SIGTERM and SIGINT save the step they stop at and exit with 128 + the signal's number and a
message (tests/harnesses/kill_resume.py does 20 kills)."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harnesses import kill_resume
from tests.harnesses.crash_in_save import POINTS
from tformer.training.checkpoint import load_training_state

STEPS = 10


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, Path]:  # noqa: ANN001
    root = tmp_path_factory.mktemp("crash")
    recipe = kill_resume.write_recipe(root, steps=STEPS)
    kill_resume.run_to_end(recipe, root / "straight", resume=False)
    return recipe, root / "straight"


def test_sigkill_at_three_random_steps_then_resume_is_bitwise_identical(straight, tmp_path) -> None:  # noqa: ANN001
    recipe, reference = straight
    killed = tmp_path / "killed"
    points = sorted(kill_resume.random.Random(1).sample(range(2, STEPS), 3))
    interrupted = [kill_resume.run_killed_at(recipe, killed, step, resume=i > 0) for i, step in enumerate(points)]
    assert all(interrupted), f"a run ended before its kill at {points}"
    assert load_training_state(killed / "last", restore_rng=False)["step"] < STEPS
    kill_resume.run_to_end(recipe, killed, resume=True)
    assert kill_resume.identical(reference, killed)
    assert kill_resume.logged_step(killed) == STEPS


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_inside_a_save_then_resume_is_bitwise_identical(straight, tmp_path, point: str) -> None:  # noqa: ANN001
    recipe, reference = straight
    out = tmp_path / "crashed"
    kill_resume.crashed_in_save(recipe, out, save=4, point=point, resume=False)
    leftovers = sorted(p.name.split("-")[0] for p in out.glob(".last.*"))
    if point == "aside":  # the moment without a last: both copies lie beside it
        assert not (out / "last").exists() and leftovers == [".last.old", ".last.tmp"]
    kill_resume.run_to_end(recipe, out, resume=True)
    assert kill_resume.identical(reference, out)
    assert not list(out.glob(".last.*")) and not (out / ".lock").exists()  # leftovers and the lock are gone


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_saves_the_step_and_exits_cleanly(straight, tmp_path, sig) -> None:  # noqa: ANN001
    recipe, reference = straight
    out = tmp_path / "stopped"
    proc = kill_resume.start(recipe, out, resume=False)
    while proc.poll() is None and kill_resume.logged_step(out) < 3:
        time.sleep(0.002)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig.value, err
    assert "Traceback" not in err
    step = load_training_state(out / "last", restore_rng=False)["step"]
    assert 3 <= step < STEPS
    assert f"{sig.name} at step {step}: saved {out}/last; continue with --resume" in err
    assert kill_resume.logged_step(out) == step  # the step it stopped at was saved, nothing lost
    kill_resume.run_to_end(recipe, out, resume=True)
    assert kill_resume.identical(reference, out)


def test_kill_resume_script_reports(tmp_path) -> None:  # noqa: ANN001
    done = subprocess.run([sys.executable, "-m", "tests.harnesses.kill_resume",
                           "--kills", "99", "--steps", "10", "--out-dir", str(tmp_path)], capture_output=True,
                          text=True, cwd=kill_resume.ROOT)
    assert done.returncode == 2 and "--kills=99 must be in 1..steps-2=8" in done.stderr
