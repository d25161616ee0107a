"""`tformer.data.padding`: the one padder (right for encoders, teacher forcing and scoring, left for batched
generation) and its mask of real tokens."""

from __future__ import annotations

import pytest
import torch

from tformer.data.padding import pad, valid_mask

ROWS = [[5, 6, 7], [8], []]


def test_right_padding_puts_the_tokens_first() -> None:
    assert pad(ROWS, 0).tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert valid_mask([3, 1, 0], width=3).tolist() == [[True] * 3, [True, False, False], [False] * 3]


def test_left_padding_puts_the_tokens_last() -> None:
    assert pad(ROWS, 9, "left").tolist() == [[5, 6, 7], [9, 9, 8], [9, 9, 9]]
    assert valid_mask([3, 1, 0], width=3, side="left").tolist() == [[True] * 3, [False, False, True], [False] * 3]


def test_ids_are_long_and_the_mask_matches_them() -> None:
    ids = pad([[1, 2], (3,)], 0, device="cpu")  # any sequences of ints
    assert ids.dtype == torch.long and ids.shape == (2, 2)
    for side in ("right", "left"):
        ids = pad(ROWS, -1, side)
        assert torch.equal(valid_mask([len(r) for r in ROWS], width=ids.shape[1], side=side), ids != -1)


def test_no_rows_and_a_bad_side() -> None:
    assert pad([], 0).shape == (0, 0)
    with pytest.raises(ValueError, match="side='top' is not allowed"):
        pad(ROWS, 0, "top")
    with pytest.raises(ValueError, match="side='top' is not allowed"):
        valid_mask([1], width=1, side="top")
