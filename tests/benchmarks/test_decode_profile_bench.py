"""benchmarks/decode_profile.py on a tiny GPT and a tiny translator: step times for both engines, an operator
table whose shares are sorted and sum to at most 1, and the time outside the operators never negative."""

from __future__ import annotations

import pytest

from benchmarks.decode_profile import main


@pytest.mark.parametrize("task", ["generate", "beam"])
def test_decode_profile_reports_the_split_of_a_step(tmp_path, task: str) -> None:  # noqa: ANN001
    out = main(["--task", task, "--small", "--new-tokens", "4", "--reps", "1", "--top", "5", "--threads", "1",
                "--out", str(tmp_path / "p.json")])
    assert set(out["step_us"]) == {"tformer", "ct2"} and min(out["step_us"].values()) > 0
    shares = [row["share"] for row in out["ops"]]
    assert 0 < len(shares) <= 5 and shares == sorted(shares, reverse=True) and sum(shares) <= 1 + 1e-9
    assert out["operators_us"] > 0 and out["outside_operators_us"] >= 0
    assert out["task"] == task and (tmp_path / "p.json").exists()
