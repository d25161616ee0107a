"""BERT's sentence pairs for next-sentence prediction (Devlin et al. 2019, section 3.1, "Task #2: NSP").

Every adjacent pair of sentences (A, B) of a document makes one example; for exactly half of them, chosen
at random, B is replaced by a random sentence of another document, so B never is A itself and never comes
from A's document. The input is

    [CLS] A [SEP] B [SEP]        segments 0 ... 0 0 1 ... 1 1

and the label is 0 when B follows A, 1 when B is random (the convention of Hugging Face's
`BertForPreTraining`). A pair longer than the context is truncated fairly: a token is cut from the end of
the longer sentence until it fits, so neither side loses everything.

B batch, T length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from tformer.data.padding import pad, valid_mask
from tformer.errors import UserError

Document = Sequence[Sequence[int]]  # the sentences of one document, as token ids


class Pair(NamedTuple):
    ids: list[int]  # [CLS] A [SEP] B [SEP]
    segments: list[int]  # 0 over [CLS] A [SEP], 1 over B [SEP]
    is_random: int  # 0: B follows A; 1: B is a random sentence of another document


def truncate_pair(a: Sequence[int], b: Sequence[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Cut tokens from the end of the longer sentence (A on a tie) until len(a) + len(b) <= max_tokens."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def make_pair(a: Sequence[int], b: Sequence[int], *, is_random: int, max_len: int, cls_id: int,
              sep_id: int) -> Pair:
    a, b = truncate_pair(a, b, max_len - 3)
    ids = [cls_id, *a, sep_id, *b, sep_id]
    return Pair(ids, [0] * (len(a) + 2) + [1] * (len(b) + 1), is_random)


def make_pairs(documents: Sequence[Document], *, max_len: int, cls_id: int, sep_id: int,
               rng: np.random.Generator) -> list[Pair]:
    """One pair per adjacent sentence pair of each document, half of them (exactly) with a random B."""
    if max_len < 5:
        raise UserError(f"max_len={max_len} leaves no room for two sentences and [CLS] [SEP] [SEP]")
    docs = [d for d in documents if len(d) > 0]
    if len(docs) < 2:
        raise UserError("next-sentence pairs need at least two non-empty documents")
    adjacent = [(d, i) for d, doc in enumerate(docs) for i in range(len(doc) - 1)]
    if not adjacent:
        raise UserError("next-sentence pairs need a document with at least two sentences")
    flags = rng.permutation(np.arange(len(adjacent)) % 2)  # exactly half random (one more true if odd)
    pairs = []
    for (d, i), is_random in zip(adjacent, flags.tolist(), strict=True):
        b = docs[d][i + 1]
        if is_random:
            other = int(rng.integers(len(docs) - 1))
            other += other >= d  # any document but A's own
            b = docs[other][int(rng.integers(len(docs[other])))]
        pairs.append(make_pair(docs[d][i], b, is_random=is_random, max_len=max_len, cls_id=cls_id, sep_id=sep_id))
    return pairs


class PairBatch(NamedTuple):
    ids: Tensor  # (B, T) padded
    segments: Tensor  # (B, T)
    valid: Tensor  # (B, T) True at real tokens
    is_random: Tensor  # (B,) next-sentence labels


def collate_pairs(pairs: Sequence[Pair], *, pad_id: int) -> PairBatch:
    ids = pad([p.ids for p in pairs], pad_id)  # (B, T)
    segments = pad([p.segments for p in pairs], 0)  # (B, T)
    valid = valid_mask([len(p.ids) for p in pairs], width=ids.shape[1])  # (B, T)
    return PairBatch(ids, segments, valid, torch.tensor([p.is_random for p in pairs]))


def length_batches(lengths: Sequence[int], *, batch_size: int, rng: np.random.Generator | None) -> list[list[int]]:
    """Indices in batches of `batch_size` examples of similar length (sorted within windows of 50 batches),
    the batches in random order; with rng=None, in sorted order (for evaluation)."""
    order = np.arange(len(lengths)) if rng is None else rng.permutation(len(lengths))
    window = 50 * batch_size
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window].tolist(), key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches
