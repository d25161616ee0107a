"""benchmarks/complexity.py: a --quick run writes its table, plots and raw points; the log-log fit recovers
the exponent of a power law; the forecast stops a sweep before a point that would blow the budget."""

import argparse
import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks import complexity
from benchmarks.common import forecast, loglog_slope


def test_loglog_slope_of_a_power_law() -> None:
    ns = [256, 512, 1024, 2048, 4096]
    assert loglog_slope(ns, [3e-9 * n**2 for n in ns]) == pytest.approx(2.0)
    assert loglog_slope(ns, [0.5 * n for n in ns]) == pytest.approx(1.0)
    assert math.isnan(loglog_slope([256], [1.0]))


def test_fit_window_large_n_else_upper_half() -> None:
    assert complexity.fit_window([256, 512, 1024, 2048], 1024) == [2, 3]
    assert complexity.fit_window([128, 256, 512], 1024) == [1, 2]
    assert complexity.fit_window([64, 128], 1024) == [0, 1]
    assert complexity.fit_window([32, 64, 128, 256, 512], None) == [2, 3, 4]


def test_forecast_stops_before_a_point_over_budget() -> None:
    args = argparse.Namespace(budget=5.0, mem_cap_gib=1.0)
    points = [dict(n=1024, time_s=1.0, memory_bytes=2**20), dict(n=2048, time_s=4.0, memory_bytes=2**21)]
    assert forecast(points, 4096, "n", complexity.limits(args)) is None  # 16 s predicted, under 4 x 5 s
    args.budget = 3.0
    assert "predicted 16 s" in forecast(points, 4096, "n", complexity.limits(args))


@pytest.fixture
def keep_threads() -> None:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_quick_run_writes_table_plots_and_points(tmp_path: Path, keep_threads: None) -> None:
    kinds = ["sdpa", "lstm", "windowed"]
    complexity.main(["--quick", "--kinds", *kinds, "--out", str(tmp_path)])
    for name in ("results.json", "table.md", "complexity-time_vs_n.png", "complexity-memory_vs_n.png",
                 "complexity-time_vs_d.png"):
        assert (tmp_path / name).stat().st_size > 0
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert list(results) == kinds
    for r in results.values():
        assert [p["n"] for p in r["n"]["points"]] == [128, 256]
        assert [p["d"] for p in r["d"]["points"]] == [32, 64]
        assert all(p["time_s"] > 0 and p["memory_bytes"] > 0 for p in r["n"]["points"] + r["d"]["points"])
        assert r["per_token"]["parallel_s_per_token"] > 0
    assert results["lstm"]["per_token"]["stepwise_s_per_token"] > 0
    table = (tmp_path / "table.md").read_text()
    assert all(f"| {kind} |" in table for kind in kinds)
