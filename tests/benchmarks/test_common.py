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
    alternate_checked,
    apply_quick,
    device_arg,
    forecast,
    loglog_slope,
    recent_slope,
    run_main,
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


def test_alternate_checked_gives_every_round_its_quiet_check() -> None:
    times, checks = alternate_checked({"a": lambda: None, "b": lambda: None}, CPU, 2, threshold=0.5)
    assert {k: len(v) for k, v in checks.items()} == {"a": 2, "b": 2} and set(times) == {"a", "b"}
    assert all(c.threshold == 0.5 and c.wall_s >= 0 for cs in checks.values() for c in cs)


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


# --- bad arguments: argparse's error and exit code 2, or one line and exit code 2, never a traceback ------------

BAD_ARGS = [  # (benchmark, argv, what stderr names)
    ("train_speed", ["--device", "cuda:9"], "--device='cuda:9' but torch sees"),
    ("train_speed", ["--device", "tpu"], "--device='tpu' is not a device; use auto, cpu, cuda or cuda:N"),
    ("train_speed", ["--batch", "0"], "argument --batch: 0 is below 1; give a whole number >= 1"),
    ("train_speed", ["--reps", "many"], "argument --reps: 'many' is not a whole number"),
    ("train_speed", ["--warmup", "-1"], "argument --warmup: -1 is below 0"),
    ("train_speed", ["--nanogpt", "/nonexistent/nanoGPT"], "--nanogpt /nonexistent/nanoGPT: no model.py there"),
    ("generate", ["--batches", "1", "0"], "argument --batches: 0 is below 1"),
    ("generate", ["--new-tokens", "0"], "argument --new-tokens: 0 is below 1"),
    ("gpu_decode_check", ["--out", "x.json", "--device", "cuda:9"], "--device='cuda:9' but torch sees"),
    ("gpu_decode_check", ["--out", "x.json", "--reps", "0"], "argument --reps: 0 is below 1"),
    ("step_profile", ["demo-gpu", "--steps", "0"], "argument --steps: 0 is below 1"),
    ("complexity", ["--device", "gpu"], "--device='gpu' is not a device"),
    ("translate_speed", ["--device", "cuda:9"], "--device='cuda:9' but torch sees"),
]


@pytest.mark.parametrize(("module", "argv", "named"), BAD_ARGS, ids=[f"{m}-{a[-2]}{a[-1]}" for m, a, _ in BAD_ARGS])
def test_a_bad_argument_is_exit_code_2_and_named(module: str, argv: list[str], named: str,
                                                 capsys: pytest.CaptureFixture) -> None:
    import importlib

    parse_args = importlib.import_module(f"benchmarks.{module}").parse_args
    with pytest.raises(SystemExit) as stopped:
        parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


def test_device_arg_resolves_as_tformer_does() -> None:
    assert device_arg("cpu") == "cpu"
    assert device_arg("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_a_setting_tformer_refuses_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture) -> None:
    from tformer.errors import UserError

    def main() -> None:
        raise UserError("d_model=64 is not divisible by n_heads=7")

    with pytest.raises(SystemExit) as stopped:
        run_main(main, "generate")
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "generate: d_model=64 is not divisible by n_heads=7\n"


def test_generate_refuses_heads_that_do_not_divide_the_width(capsys: pytest.CaptureFixture) -> None:
    """Through a real benchmark's main: the model's own check, before anything is timed."""
    from benchmarks import generate

    with pytest.raises(SystemExit) as stopped:
        run_main(lambda: generate.main(["--device", "cpu", "--layers", "1", "--d-model", "64", "--heads", "7",
                                        "--vocab", "100", "--new-tokens", "2", "--reps", "1"]), "generate")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("generate: d_model=64 is not divisible by n_heads=7") and err.count("\n") == 1
