"""Exact-sequence and token accuracy, bucket by source length: what a task with one right answer per source
(reversing or copying a sequence, `data/synthetic.py`) is measured by, and how the plain RNN encoder-decoder's
fixed-size code shows against attention's (Bahdanau et al. 2015, figure 2).

exact: the share of hypotheses equal to their reference, token for token.
token accuracy: over all the bucket's pairs, the positions where hypothesis and reference hold the same token,
over the positions of the longer of the two (a hypothesis too short or too long loses the positions it misses
or adds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tformer.errors import UserError


def length_buckets(min_len: int, max_len: int, width: int) -> list[tuple[int, int]]:
    """[min_len, max_len] cut into buckets of `width` lengths, each (lowest, highest); the last may be narrower.
    (5, 80, 10) -> (5, 14), (15, 24), ..., (75, 80)."""
    if not 0 <= min_len <= max_len or width < 1:
        raise UserError(f"length buckets from {min_len} to {max_len}, {width} wide: need 0 <= min_len <= max_len "
                        "and width >= 1")
    return [(lo, min(lo + width - 1, max_len)) for lo in range(min_len, max_len + 1, width)]


def matches(hyp: Sequence, ref: Sequence) -> tuple[int, int]:
    """(positions where hyp and ref agree, positions of the longer one)."""
    return sum(h == r for h, r in zip(hyp, ref, strict=False)), max(len(hyp), len(ref))


def accuracy_by_length(lengths: Sequence[int], hyps: Sequence[Sequence], refs: Sequence[Sequence],
                       buckets: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """Per bucket (lowest, highest source length): its label "lo-hi", its number of pairs, their exact and
    token accuracy in [0, 1] (None for an empty bucket). `lengths[i]` is the i-th source's length; hypotheses and
    references are token sequences (ids, or a string's characters). A length in no bucket is a UserError."""
    if not len(lengths) == len(hyps) == len(refs):
        raise UserError(f"{len(lengths)} lengths, {len(hyps)} hypotheses and {len(refs)} references: need one each")
    members: list[list[int]] = [[] for _ in buckets]
    for i, n in enumerate(lengths):
        k = next((k for k, (lo, hi) in enumerate(buckets) if lo <= n <= hi), None)
        if k is None:
            raise UserError(f"source {i} is {n} tokens long, outside every bucket {list(buckets)}")
        members[k].append(i)
    out = []
    for (lo, hi), inside in zip(buckets, members, strict=True):
        right = total = exact = 0
        for i in inside:
            agree, positions = matches(hyps[i], refs[i])
            right, total, exact = right + agree, total + positions, exact + (list(hyps[i]) == list(refs[i]))
        out.append({"bucket": f"{lo}-{hi}" if hi > lo else str(lo), "low": lo, "high": hi, "sequences": len(inside),
                    "exact": exact / len(inside) if inside else None,
                    "token_accuracy": right / total if total else None})
    return out


__all__ = ["accuracy_by_length", "length_buckets", "matches"]
