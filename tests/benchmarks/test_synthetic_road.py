"""benchmarks/synthetic_road.py --quick: the three synthetic recipes trained a few steps each (tiny models, a
tiny corpus), scored by length on the test split, the JSON, the table and the picture written; a run that is
there already is taken, not trained again; a bad override is one line before anything is trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import synthetic_road

pytestmark = pytest.mark.usefixtures("one_thread")


def test_quick_mode_trains_scores_and_writes_json_table_and_picture(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    argv = ["--quick", "--runs", str(runs), "--out", str(out), "--width", "4"]
    assert synthetic_road.main(argv) == 0
    printed = capsys.readouterr()
    results = json.loads((out / "synthetic_road.json").read_text())["results"]
    assert [r["recipe"] for r in results] == list(synthetic_road.RECIPES)
    assert [r["model"] for r in results] == ["RNN (LSTM)", "RNN + attention (general)", "Transformer"]
    for r in results:
        assert r["steps"] == 3 and r["sequences"] == 24 and sum(b["sequences"] for b in r["buckets"]) == 24
        assert [b["bucket"] for b in r["buckets"]] == ["3-6", "7-10"]
        assert 0 <= r["exact"] <= 1 and 0 <= r["token_accuracy"] <= 1
        assert all(len(e["source"]) == len(e["reference"]) for e in r["examples"])
    table = (out / "synthetic_road.md").read_text()
    assert table in printed.out and "| RNN + attention (general) |" in table and "exact % 3-6 (n=" in table
    assert (out / "synthetic-accuracy-by-length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert synthetic_road.main(argv) == 0  # the runs are there: taken, not trained again
    assert capsys.readouterr().err.count("taking the run in") == 3


def test_a_bad_override_is_one_line_before_any_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--quick", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
            "--set", "data.synthetic.min_len=20"]
    assert synthetic_road.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.synthetic.min_len=20, max_len=10 is not a length range" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()
