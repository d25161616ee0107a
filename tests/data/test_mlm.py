"""BERT's masked-LM corruption: 15% selected, then 80% [MASK] / 10% random / 10% kept (binomial tolerance)."""

import math

import pytest
import torch

from tformer.data.mlm import IGNORE, mask_tokens

MASK, VOCAB, N_SPECIAL = 4, 1000, 5


def corrupt(ids, maskable, seed=0, **kw):  # noqa: ANN001, ANN201
    return mask_tokens(ids, maskable=maskable, mask_id=MASK, vocab_size=VOCAB, n_special=N_SPECIAL,
                       generator=torch.Generator().manual_seed(seed), **kw)


def within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count / n - p) <= sigmas * math.sqrt(p * (1 - p) / n)


def test_selection_and_80_10_10_split_hold_within_binomial_tolerance() -> None:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(N_SPECIAL, VOCAB, (400, 128), generator=g)
    maskable = torch.rand(ids.shape, generator=g) < 0.9  # the rest stand for [CLS], [SEP] and padding
    inputs, labels = corrupt(ids, maskable)
    selected = labels != IGNORE
    n = int(maskable.sum())
    assert within(int(selected.sum()), n, 0.15)
    chosen = int(selected.sum())
    as_mask = int((inputs[selected] == MASK).sum())
    kept = int((inputs[selected] == ids[selected]).sum())
    randomised = chosen - as_mask - kept  # a random draw equal to the original counts as kept (p = 1/995)
    assert within(as_mask, chosen, 0.8) and within(randomised, chosen, 0.1 * (1 - 1 / 995))
    assert within(kept, chosen, 0.1 + 0.1 / 995)
    assert not selected[~maskable].any()  # special tokens and padding are never selected
    assert torch.equal(inputs[~selected], ids[~selected])  # nothing else changes
    assert torch.equal(labels[selected], ids[selected])
    assert (inputs[selected & (inputs != MASK)] >= N_SPECIAL).all()  # random tokens are ordinary tokens


def test_same_seed_same_masking_other_seed_other() -> None:
    ids = torch.randint(N_SPECIAL, VOCAB, (8, 64))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    a, b, c = corrupt(ids, maskable, seed=3), corrupt(ids, maskable, seed=3), corrupt(ids, maskable, seed=4)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.labels, c.labels)


def test_whole_word_masking_selects_every_piece_of_a_word_or_none() -> None:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(N_SPECIAL, VOCAB, (64, 96), generator=g)
    starts = torch.rand(ids.shape, generator=g) < 0.4
    starts[:, 0] = True
    word_ids = starts.long().cumsum(1) - 1  # (B, T): pieces of one word share a number
    maskable = torch.ones_like(ids, dtype=torch.bool)
    _, labels = corrupt(ids, maskable, word_ids=word_ids)
    selected = labels != IGNORE
    for row in range(ids.shape[0]):
        for word in word_ids[row].unique():
            picks = selected[row][word_ids[row] == word]
            assert picks.all() or not picks.any()
    words = int(starts.sum())
    chosen_words = sum(int(selected[r][starts[r]].sum()) for r in range(ids.shape[0]))
    assert within(chosen_words, words, 0.15)


def test_bad_probability_is_a_value_error() -> None:
    ids = torch.randint(N_SPECIAL, VOCAB, (2, 4))
    with pytest.raises(ValueError, match="prob=1.5"):
        corrupt(ids, torch.ones_like(ids, dtype=torch.bool), prob=1.5)
