"""The types of the command line's numeric and text options: each value is checked while the arguments are
parsed, before any checkpoint loads or any output starts, and a bad one is refused in argparse's one-line
style, `argument --lenpen: 'nan' is not a finite number`.

    real(low=, high=)      a float that is finite (no nan, inf or -inf, nor a value like 1e999 that
                           overflows to inf), within [low, high] where given
    integer(low=, high=)   an int within [low, high]; every int fits torch's int64 unless a bound says less
    SEED                   an int torch.manual_seed takes: 0 .. 2**64 - 1
    text                   a text argument (a prompt) that is valid UTF-8

Ranges a library function checks before its work starts (`--beam` by `decode_config`, `--top-p` by
`check_sampling`) keep that check, so the Python API and the command line refuse the same value with the same
message; the types here add what nothing else checks early: finiteness, integer overflow, and the bounds of
options used only by the command line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

INT64_MAX = 2**63 - 1


def real(*, low: float | None = None, high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite float in [low, high] (either bound optional)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number{_bounds(low, high)}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} is out of range{_bounds(low, high)}")
        return value

    parse.__name__ = "real"
    return parse


def integer(*, low: int = -INT64_MAX - 1, high: int = INT64_MAX) -> Callable[[str], int]:
    """An argparse type: an int in [low, high] (by default, what fits a 64-bit integer)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range; give an integer in {_span(low, high)}")
        return value

    parse.__name__ = "integer"
    return parse


SEED = integer(low=0, high=2**64 - 1)  # torch.Generator.manual_seed's range
INT8_HELP = "quantize the linear layers to int8 at load, for speed on the CPU (tformer.quant; docs/int8.md)"


def text(value: str) -> str:
    """An argparse type: a text argument that is valid UTF-8. Python hands the bytes of an argument that is
    not as lone surrogates ("\\udcff" for byte 0xff); a tokenizer cannot encode those."""
    bad = next((i for i, c in enumerate(value) if "\udc80" <= c <= "\udcff"), None)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"not valid UTF-8 (byte {ord(value[bad]) - 0xDC00:#04x} at character "
                                         f"{bad + 1})")
    return value


def _bounds(low: float | None, high: float | None) -> str:
    if low is None and high is None:
        return ""
    if low is None:
        return f"; give a number <= {high:g}"
    if high is None:
        return f"; give a number >= {low:g}"
    return f"; give a number in [{low:g}, {high:g}]"


def _span(low: int, high: int) -> str:
    if low == -INT64_MAX - 1 and high == INT64_MAX:
        return "[-2**63, 2**63 - 1]"
    if high == INT64_MAX:
        return f"[{low}, 2**63 - 1]"
    if high == 2**64 - 1:
        return f"[{low}, 2**64 - 1]"
    return f"[{low}, {high}]"


__all__ = ["INT64_MAX", "INT8_HELP", "SEED", "integer", "real", "text"]
