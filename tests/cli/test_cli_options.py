"""The argparse types of `tformer.cli.options`, and the library checks behind them for the Python API."""

from __future__ import annotations

import argparse

import pytest

from tformer.cli import options
from tformer.inference import DecodeConfig


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"])
def test_real_refuses_what_is_not_finite(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a finite number"):
        options.real()(text)


def test_real_bounds_and_plain_values() -> None:
    assert options.real()("-1.5") == -1.5 and options.real(low=0, high=1)("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError, match=r"2 is out of range; give a number in \[0, 1\]"):
        options.real(low=0, high=1)("2")
    with pytest.raises(argparse.ArgumentTypeError, match="invalid float value: 'x'"):
        options.real()("x")


def test_integer_and_seed_ranges() -> None:
    assert options.integer()(str(2**63 - 1)) == 2**63 - 1 and options.SEED(str(2**64 - 1)) == 2**64 - 1
    for parse, text in ((options.integer(), str(2**63)), (options.integer(), str(-(2**63) - 1)),
                        (options.SEED, "-1"), (options.SEED, str(2**64)), (options.integer(low=1), "0")):
        with pytest.raises(argparse.ArgumentTypeError, match="is out of range; give an integer in"):
            parse(text)
    with pytest.raises(argparse.ArgumentTypeError, match="invalid int value: '1.5'"):
        options.integer()("1.5")


def test_text_refuses_bytes_that_are_not_utf8() -> None:
    assert options.text("caf\u00e9 \u2028") == "caf\u00e9 \u2028"
    with pytest.raises(argparse.ArgumentTypeError, match=r"not valid UTF-8 \(byte 0xe9 at character 4\)"):
        options.text("caf\udce9")


@pytest.mark.parametrize("field", ["lenpen", "max_len_a"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_decode_config_refuses_non_finite_numbers(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"decode.{field}={value} is not a finite number"):
        DecodeConfig(**{field: value})
