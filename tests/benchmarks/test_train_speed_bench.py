"""benchmarks/train_speed.py and benchmarks/machine.py at tiny scale: every family's contenders train the
same weights (equal step-0 losses) at a finite, positive speed, and the machine's limits come out positive."""

import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks import machine, train_speed
from benchmarks.common import plain


def test_machine_limits_are_positive(one_thread: None) -> None:
    assert machine.matmul_gflops("cpu", n=128, reps=2) > 0
    assert machine.bandwidth_gb_s("cpu", mib=4, reps=2) > 0
    assert machine.matvec_gb_s("cpu", mib=4, reps=2) > 0
    info = machine.describe()
    assert info["threads"] == 1 and info["cpu"] and info["torch"] == torch.__version__


def test_streaming_read_at_each_thread_count_and_the_bound_it_sets(one_thread: None) -> None:
    for threads in (1, 2):
        gb_s = machine.read_gb_s("cpu", nbytes=2**20, threads=threads, reps=2)
        assert math.isfinite(gb_s) and gb_s > 0
        assert torch.get_num_threads() == 1  # the caller's count restored
    assert machine.read_gb_s("cpu", nbytes=1000, reps=1) > 0  # smaller than one row of the mat-vec
    bound = machine.decode_bound("cpu", 2**20, threads=1, reps=2)
    assert bound["tokens_per_s"] == pytest.approx(bound["bandwidth_gb_s"] * 1e9 / 2**20) and bound["threads"] == 1
    fake = dict(bound, tokens_per_s=100.0)
    assert machine.against_bound(fake, {"a": 50.0, "b": 80.0}) == dict(fake, a_share=0.5, b_share=0.8,
                                                                       mismeasured=None)
    beaten = machine.against_bound(fake, {"a": 50.0, "b": 160.0})
    assert beaten["a_share"] is None and beaten["b_share"] is None
    assert beaten["mismeasured"] == "the bound is mismeasured: b decodes 160 tokens/s, above its 100"


def test_quick_run_same_losses_and_positive_speeds(tmp_path: Path, one_thread: None) -> None:
    out = tmp_path / "train_speed.json"
    report = train_speed.main(["--quick", "--threads", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == plain(report)
    assert all(v > 0 for v in report["limits"].values())
    names = {r["family"]: [row["contender"] for row in r["rows"]] for r in report["results"]}
    assert names == {"gpt": ["tformer", "GPT2LMHeadModel eager", "GPT2LMHeadModel sdpa"],
                     "bert": ["tformer", "BertForPreTraining"],
                     "seq2seq": ["tformer", "torch.nn.Transformer", "MarianMTModel"]}
    for result in report["results"]:
        assert result["max_loss0_diff"] <= 1e-3, result["family"]
        for row in result["rows"]:
            assert math.isfinite(row["tokens_per_s"]) and row["tokens_per_s"] > 0
            assert 0 < row["mfu"] < math.inf and math.isfinite(row["loss0"])
            assert row["parameters"] > 0
            assert row["quiet"] in ("quiet", "not quiet", "unknown") and len(row["rounds"]) == report["args"]["reps"]


def test_precision_and_ours_only(one_thread: None) -> None:
    report = train_speed.main(["--quick", "--threads", "1", "--families", "gpt", "--precision", "bf16", "--ours-only"])
    (result,) = report["results"]
    assert result["precision"] == "bf16" and not result["compile"]
    assert [row["contender"] for row in result["rows"]] == ["tformer", "tformer fp32 eager"]
    assert all(row["first_step_s"] > 0 and math.isfinite(row["loss0"]) for row in result["rows"])
    assert 0 < result["max_loss0_diff"] < 0.05  # the same weights, one of them run in bfloat16


def test_nanogpt_without_its_model_file_is_exit_code_2(tmp_path: Path, one_thread: None,
                                                       capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stopped:  # refused with the arguments, before anything is timed
        train_speed.main(["--quick", "--threads", "1", "--families", "gpt", "--hf-attention", "sdpa",
                          "--nanogpt", str(tmp_path)])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"--nanogpt {tmp_path}: no model.py there (git clone "
                                                             "https://github.com/karpathy/nanoGPT)")
