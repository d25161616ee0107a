"""Exact and token accuracy by source length (evaluation/accuracy.py) on pairs worked out by hand."""

from __future__ import annotations

import pytest

from tformer.errors import UserError
from tformer.evaluation.accuracy import accuracy_by_length, length_buckets, matches


def test_buckets_cut_the_range_and_the_last_may_be_narrower() -> None:
    assert length_buckets(5, 80, 10)[:2] == [(5, 14), (15, 24)] and length_buckets(5, 80, 10)[-1] == (75, 80)
    assert length_buckets(3, 3, 10) == [(3, 3)]
    with pytest.raises(UserError, match="need 0 <= min_len <= max_len and width >= 1"):
        length_buckets(9, 3, 2)


def test_matches_count_aligned_positions_over_the_longer_sequence() -> None:
    assert matches("abc", "abc") == (3, 3)
    assert matches("abd", "abc") == (2, 3)
    assert matches("ab", "abcd") == (2, 4)  # too short: the missing positions are wrong
    assert matches("abcdef", "abc") == (3, 6)  # too long: the extra positions are wrong


def test_accuracy_by_length_by_hand() -> None:
    #            source length, hypothesis, reference
    pairs = [(2, "ba", "ba"),  # right
             (3, "cba", "cba"),  # right
             (3, "cbx", "cba"),  # one token wrong
             (5, "edc", "edcba"),  # too short: 3 of 5
             (6, "fedcba", "fedcba")]  # right
    lengths, hyps, refs = zip(*pairs, strict=True)
    rows = accuracy_by_length(lengths, hyps, refs, [(1, 3), (4, 6), (7, 9)])
    assert [r["bucket"] for r in rows] == ["1-3", "4-6", "7-9"]
    assert [r["sequences"] for r in rows] == [3, 2, 0]
    assert rows[0]["exact"] == pytest.approx(2 / 3) and rows[0]["token_accuracy"] == pytest.approx(7 / 8)
    assert rows[1]["exact"] == pytest.approx(1 / 2) and rows[1]["token_accuracy"] == pytest.approx(9 / 11)
    assert rows[2]["exact"] is None and rows[2]["token_accuracy"] is None
    ids = accuracy_by_length([2], [[7, 8]], [[7, 9]], [(2, 2)])  # token ids compare as well as characters
    assert ids[0]["bucket"] == "2" and ids[0]["exact"] == 0 and ids[0]["token_accuracy"] == 0.5


def test_a_length_outside_every_bucket_or_unmatched_lists_are_refused() -> None:
    with pytest.raises(UserError, match="source 0 is 9 tokens long, outside every bucket"):
        accuracy_by_length([9], ["a"], ["a"], [(1, 3)])
    with pytest.raises(UserError, match="2 lengths, 1 hypotheses and 1 references"):
        accuracy_by_length([1, 2], ["a"], ["a"], [(1, 3)])
