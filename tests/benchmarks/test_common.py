"""benchmarks/common.py: what every benchmark shares: timing, alternating contenders, slopes, forecasts,
--quick presets and JSON results."""

import argparse
import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks.common import (
    Limit,
    alternate,
    apply_quick,
    forecast,
    loglog_slope,
    recent_slope,
    timed,
    warm_median,
    write_json,
)

CPU = torch.device("cpu")


def test_timed_returns_the_value_and_a_positive_time() -> None:
    seconds, value = timed(lambda: sum(range(1000)), CPU)
    assert value == 499500 and seconds > 0


def test_warm_median_times_once_when_the_warm_up_is_over_budget() -> None:
    calls = []
    point = warm_median(lambda: calls.append(1), CPU, reps=3, budget=10.0)
    assert len(calls) == 4 and len(point["times_s"]) == 3 and point["time_s"] in point["times_s"]
    calls.clear()
    point = warm_median(lambda: calls.append(1), CPU, reps=3, budget=-1.0)  # any warm-up is "over budget"
    assert len(calls) == 2 and len(point["times_s"]) == 1


def test_alternate_reverses_the_order_on_odd_rounds() -> None:
    order = []
    times = alternate({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, CPU, 3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}


def test_slopes_of_power_laws() -> None:
    ns = [256, 512, 1024, 2048]
    assert loglog_slope(ns, [3e-9 * n**2 for n in ns]) == pytest.approx(2.0)
    assert math.isnan(loglog_slope([256], [1.0]))
    points = [dict(n=1024, t=1.0), dict(n=2048, t=8.0)]
    assert recent_slope(points, "t", "n") == pytest.approx(3.0)
    assert recent_slope(points[:1], "t", "n") == 2.0  # one point: assume quadratic
    assert recent_slope([dict(n=1, t=4.0), dict(n=2, t=2.0)], "t", "n") == 1.0  # never below linear


def test_forecast_names_the_first_limit_that_would_be_exceeded() -> None:
    points = [dict(n=1024, t=1.0, m=10.0), dict(n=2048, t=2.0, m=40.0)]  # t slope 1, m slope 2
    limits = (Limit("t", 5.0, 1, "s"), Limit("m", 100.0, 1, "B"))
    assert forecast([], 4096, "n", limits) is None
    assert forecast(points, 4096, "n", limits) == "n=4096 not run: predicted 160 B > 100 B"
    assert forecast(points, 4096, "n", (Limit("t", 3.0, 1, "s"),)) == "n=4096 not run: predicted 4 s > 3 s"
    assert forecast(points, 4096, "n", (Limit("t", 5.0, 1, "s"),)) is None


def test_apply_quick_keeps_what_the_user_gave() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(["--d", "512"])
    apply_quick(p, args, {"d": 64, "reps": 1})
    assert (args.d, args.reps) == (512, 1)


def test_write_json_makes_plain_json(tmp_path: Path) -> None:
    path = write_json(tmp_path / "a" / "r.json", {"x": math.nan, "inf": math.inf, "p": Path("/tmp/x"), "t": (1, 2),
                                                  "dtype": torch.float32})
    assert json.loads(path.read_text()) == {"x": None, "inf": None, "p": "/tmp/x", "t": [1, 2],
                                            "dtype": "torch.float32"}
