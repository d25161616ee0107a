"""BERT's masked-language-model corruption (Devlin et al. 2019, section 3.1, "Task #1: Masked LM").

Of the tokens that may be predicted (not [CLS], [SEP] or padding), each is selected with probability 15%.
A selected token is replaced by [MASK] with probability 80%, by a random ordinary token with 10%, and kept
with 10%; the model must predict the original token at every selected position, and at no other (labels
there are IGNORE = -100, which the loss skips). Keeping some tokens and randomising others means the model
cannot learn that only [MASK] positions matter, since [MASK] never occurs when it is fine-tuned.

Whole-word masking selects words instead of pieces: a word's pieces are selected (and predicted) together,
while the 80/10/10 choice is still made for each piece, as in the reference implementation.

Randomness comes from a `torch.Generator`, so a seeded run masks the same way every time.
B batch, T length.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from tformer.errors import UserError

IGNORE = -100  # label of a position that is not predicted (the loss's ignore_index)


class Masked(NamedTuple):
    inputs: Tensor  # (B, T) token ids after corruption
    labels: Tensor  # (B, T) the original id where selected, IGNORE elsewhere


def mask_tokens(ids: Tensor, *, maskable: Tensor, mask_id: int, vocab_size: int, n_special: int,
                generator: torch.Generator, prob: float = 0.15, word_ids: Tensor | None = None) -> Masked:
    """Corrupt `ids` (B, T) for masked-LM training.

    maskable (B, T) is True at tokens that may be selected (False at special tokens and padding). Random
    replacements are drawn from the ordinary tokens, ids n_special .. vocab_size - 1. word_ids (B, T), if
    given, numbers the words of each row (pieces of one word share a number): whole words are selected."""
    if not 0.0 < prob < 1.0:
        raise UserError(f"mask prob={prob} must be in (0, 1)")
    if maskable.shape != ids.shape or (word_ids is not None and word_ids.shape != ids.shape):
        raise UserError(f"maskable/word_ids must have the shape of ids {tuple(ids.shape)}")
    draw = torch.rand(ids.shape, generator=generator)  # (B, T)
    if word_ids is not None:  # one draw per word: the draw at the word's first piece
        first = torch.zeros_like(ids).scatter_reduce(1, word_ids, torch.arange(ids.shape[1]).expand_as(ids),
                                                     reduce="amin", include_self=False)  # (B, W) index
        draw = draw.gather(1, first.gather(1, word_ids))
    selected = (draw < prob) & maskable
    action = torch.rand(ids.shape, generator=generator)  # (B, T): < 0.8 mask, < 0.9 random, else keep
    random_ids = torch.randint(n_special, vocab_size, ids.shape, generator=generator)
    inputs = torch.where(selected & (action < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(selected & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE))
    return Masked(inputs, labels)
