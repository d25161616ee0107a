"""benchmarks.continuous_profile --quick: a tiny random GPT's continuous batch, every request admitted once and
run to its length, each method's calls counted, the same run again as a TextStream would; and the methods of
`Running` unwrapped afterwards."""

import json
from pathlib import Path

import pytest

from benchmarks.continuous_profile import METHODS, main
from tformer.decoding.continuous import Running


def test_it_counts_every_request_and_method_and_unwraps_them(tmp_path: Path, capsys) -> None:
    before = {name: getattr(Running, name) for name in METHODS}
    result = main(["--quick", "--rows", "4", "--out", str(tmp_path / "profile.json")])
    assert {name: getattr(Running, name) for name in METHODS} == before
    methods = result["methods"]
    assert methods["admit"]["calls"] == 6 and methods["_join"]["calls"] == 6  # none ends at its first token
    assert 2 * 6 <= result["tokens"] <= 8 * 6  # stop is off: each runs to its max_new_tokens, 2 to 8
    assert methods["_draw"]["calls"] == result["tokens"]  # one draw a token
    assert result["steps"] == methods["step"]["calls"] > 0 and result["tokens_per_s"] > 0
    assert json.loads((tmp_path / "profile.json").read_text())["tokens"] == result["tokens"]
    assert "| admit |" in capsys.readouterr().out
    streamed = main(["--quick", "--rows", "4", "--stream"])
    assert streamed["tokens"] == result["tokens"]  # the same seeded requests


def test_scaling_times_each_row_count(capsys) -> None:
    result = main(["--quick", "--rows", "4", "--scaling"])
    assert list(result["ms_per_step"]) == [1, 2, 4] and all(t > 0 for t in result["ms_per_step"].values())
    assert result["ceiling"] == result["continuous_tokens_per_s"] / result["micro_tokens_per_s"]
    assert "ceiling of continuous over micro" in capsys.readouterr().out


def test_the_ceiling_is_one_where_a_token_costs_the_same_in_any_batch_and_more_where_steps_are_flat() -> None:
    from argparse import Namespace

    from benchmarks.continuous_profile import ceiling

    linear = {1: 1.0, 2: 2.0, 4: 4.0}  # a row's token costs the same at any batch: nothing for batching to gain
    assert ceiling(linear, Namespace(rows=4, new_range=(1, 100), seed=0))["ceiling"] == pytest.approx(1.0)
    flat = {1: 1.0, 2: 1.0, 4: 1.0}  # a step costs the same at any batch (a GPU's small batches)
    assert ceiling(flat, Namespace(rows=4, new_range=(7, 7), seed=0))["ceiling"] == pytest.approx(1.0)  # no thinning
    assert ceiling(flat, Namespace(rows=4, new_range=(1, 100), seed=0))["ceiling"] > 1.3  # E[longest] / E[length]
