"""training/rundir.py: a run directory is held by one training at a time (a lock that a killed holder does not
leave behind), a fresh run is refused over an existing one unless told to replace it (and then only what a
run wrote is deleted), a `last` that a crash caught between its two renames is recovered, and a training stopped
before it made anything to keep takes back what it wrote."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tformer
from tformer.training.checkpoint import load_training_state, save_checkpoint
from tformer.training.rundir import LOCK_FILE, check_run_dir, hold, holds_run, recover

HOLDER = """
import sys, time
from tformer.training.rundir import hold
with hold(sys.argv[1], fresh=True):
    print("held", flush=True)
    time.sleep(120)
"""


def holder(out_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(out_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_training_is_refused_while_the_first_holds_the_directory(tmp_path: Path) -> None:
    proc = holder(tmp_path / "run")
    try:
        with pytest.raises(ValueError, match=rf"run is in use by another training \(pid {proc.pid}\)"), \
                hold(tmp_path / "run", fresh=True):
            pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with hold(tmp_path / "run", fresh=True):  # the killed holder's lock died with it
        assert (tmp_path / "run" / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def a_run(out_dir: Path) -> None:
    config = tformer.GPTConfig(vocab_size=11, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=8)
    save_checkpoint(out_dir / "last", model=tformer.build_model(config), config=config, state={"step": 3})
    (out_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    (out_dir / "recipe.yaml").write_text("task: lm\n")


def test_a_fresh_run_over_a_run_is_refused_and_overwrite_deletes_only_the_runs_files(tmp_path: Path) -> None:
    a_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "data").mkdir()
    assert holds_run(tmp_path) == ["last/", "metrics.jsonl"]
    with pytest.raises(ValueError, match=r"already holds a run \(last/, metrics.jsonl\); continue it with --resume"):
        check_run_dir(tmp_path, resume=False)
    with pytest.raises(ValueError, match="give one of them"):
        check_run_dir(tmp_path, resume=True, overwrite=True)
    check_run_dir(tmp_path, resume=True)
    with hold(tmp_path, fresh=True, overwrite=True):
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE, "data", "notes.txt"]
    assert holds_run(tmp_path) == [] and (tmp_path / "notes.txt").read_text() == "mine"


def test_recover_takes_the_newest_complete_copy_a_crashed_save_left(tmp_path: Path) -> None:
    config = tformer.GPTConfig(vocab_size=11, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=8)
    model = tformer.build_model(config)
    for step, name in ((3, ".last.old-a"), (4, ".last.tmp-b")):
        save_checkpoint(tmp_path / name, model=model, config=config, state={"step": step})
    assert recover(tmp_path / "last") == tmp_path / ".last.tmp-b"  # the new one, complete: the save's result
    assert load_training_state(tmp_path / "last", restore_rng=False)["step"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    save_checkpoint(tmp_path / ".last.tmp-c", model=model, config=config, state={"step": 5})
    (tmp_path / ".last.tmp-c" / "model.safetensors").write_bytes(b"half")  # caught while writing
    os.replace(tmp_path / "last", tmp_path / ".last.old-d")
    assert recover(tmp_path / "last") == tmp_path / ".last.old-d"  # the incomplete new one is not taken
    assert load_training_state(tmp_path / "last", restore_rng=False)["step"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    assert recover(tmp_path / "last") is None  # nothing to do


def test_a_training_stopped_before_it_made_anything_takes_back_what_it_wrote(tmp_path: Path) -> None:
    """An exception before a logged step or a checkpoint: what the training wrote goes (folders it made, files
    it wrote) and what was there comes back byte for byte; once it has logged a step, everything stays."""
    new = tmp_path / "a" / "b" / "run"
    with pytest.raises(KeyboardInterrupt), hold(new, fresh=True):
        (new / "recipe.yaml").write_text("task: lm\n")
        (new / "metrics.jsonl").write_text("")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "recipe.yaml").write_text("# my own\n")
    with pytest.raises(ValueError, match="refused"), hold(tmp_path, fresh=True):
        (tmp_path / "recipe.yaml").write_text("task: lm\n")
        (tmp_path / "tensorboard").mkdir()
        raise ValueError("refused")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "recipe.yaml"]
    assert (tmp_path / "recipe.yaml").read_text() == "# my own\n"

    a_run(tmp_path)  # a resumed run that trimmed its log and rewrote recipe.yaml, then was refused
    with pytest.raises(ValueError), hold(tmp_path):
        (tmp_path / "metrics.jsonl").write_text("")
        (tmp_path / "recipe.yaml").write_text("task: lm\ntrain: {max_steps: 9}\n")
        raise ValueError("refused")
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "loss": 2.0}\n'
    assert (tmp_path / "recipe.yaml").read_text() == "task: lm\n"

    with pytest.raises(ValueError), hold(tmp_path):  # a step logged: kept as it is
        (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 4, "loss": 1.0}\n')
        raise ValueError("diverged")
    assert (tmp_path / "metrics.jsonl").read_text().count("step") == 2
