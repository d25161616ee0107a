"""Data-parallel training through torchrun on CPU (gloo): 2 processes with accum_steps=1 give the weights of
1 process with accum_steps=2 (the same global batch) to 1e-5, with DDP and with FSDP; only rank 0 writes;
and a checkpoint saved by 2 ranks resumes on 1 (and back) to the same end."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch

from tests.harnesses import kill_resume

STEPS = 6
NO_DROPOUT = "model.overrides.dropout={embed: 0.0, residual: 0.0}"  # ranks draw other masks than one process
# FSDP sums the squares for the clipping norm shard by shard: a last-bit difference, which Adam with the
# paper's eps=1e-9 blows up to a whole learning-rate step in coordinates whose gradient is rounding noise
# (DDP is bitwise identical with any eps; without clipping, FSDP is too). A larger eps keeps noise noise.
EPS = "train.optim.eps=1.0e-6"


def train(recipe: Path, out: Path, *, ranks: int, accum: int, steps: int = STEPS, extra: tuple = (),
          resume: bool = False) -> str:
    args = ["-m", "tformer", "train", str(recipe), f"out_dir={out}", f"train.accum_steps={accum}",
            f"train.max_steps={steps}", "train.save_every=null", NO_DROPOUT, *extra, "--no-progress"]
    if resume:
        args.append("--resume")
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(launcher + args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def weights(out: Path) -> dict:
    return safetensors.torch.load_file(str(out / "last" / "model.safetensors"))


def max_difference(a: Path, b: Path) -> float:
    x, y = weights(a), weights(b)
    assert x.keys() == y.keys()
    return max((x[k] - y[k]).abs().max().item() for k in x)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[Path, Path]:  # noqa: ANN001
    root = tmp_path_factory.mktemp("ddp")
    recipe = kill_resume.write_recipe(root, steps=STEPS)
    train(recipe, root / "one", ranks=1, accum=2, extra=(EPS,))
    return recipe, root / "one"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_equal_one_process_with_the_same_global_batch(single, tmp_path, strategy) -> None:  # noqa: ANN001
    recipe, one = single
    out = tmp_path / strategy
    stdout = train(recipe, out, ranks=2, accum=1, extra=(f"train.distributed={strategy}", EPS))
    assert stdout.count("checkpoints in") == 1  # only rank 0 reports
    assert max_difference(one, out) <= 1e-5
    logged = [line for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(logged) == len(set(logged)) > 0  # one writer: no step logged twice
    assert not list(out.glob(".*tmp*"))


# DDP saves the optimizer state as one process does, so 2 -> 1 covers it; FSDP converts it both ways
@pytest.mark.parametrize(("strategy", "first", "then"), [("ddp", 2, 1), ("fsdp", 2, 1), ("fsdp", 1, 2)])
def test_a_checkpoint_saved_by_n_ranks_resumes_on_m(single, tmp_path, strategy, first, then) -> None:  # noqa: ANN001
    recipe, one = single
    out = tmp_path / "switch"
    extra = (f"train.distributed={strategy}", EPS)
    train(recipe, out, ranks=first, accum=2 // first, steps=STEPS // 2, extra=extra)
    train(recipe, out, ranks=then, accum=2 // then, extra=extra, resume=True)
    assert max_difference(one, out) <= 1e-5


def test_the_ranks_meet_before_the_process_group_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """teardown waits for every rank (a barrier) before it destroys the group, and a single process does
    neither."""
    from tformer.training import distributed

    calls = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    distributed.teardown(distributed.World(0, 1))
    assert calls == []
    distributed.teardown(distributed.World(1, 2))
    assert calls == ["barrier", "destroy"]
