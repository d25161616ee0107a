"""Token-budget batching, as in fairseq, and collation of (source, target) id lists into padded tensors.

Sentences vary in length from a few tokens to a few hundred, so a fixed number of sentences a batch wastes
memory on padding or runs out of it. Instead, examples are sorted by length and packed into batches whose
*padded* size, examples x longest example, stays within `max_tokens`; the batch order is then shuffled.
Everything random is drawn from (seed, epoch), so `batches_for_epoch(epoch)` is the same list on every call
and a run resumed at (epoch, batch index) sees exactly the batches it would have seen.

Lengths are the lengths of the tensors `collate` builds: len(source) for `src`, len(target) + 1 for `tgt_in`
(<s> + target) and `tgt_out` (target + </s>).

B batch, S source length, T target length (+1 for <s> / </s>).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from tformer.data.padding import pad
from tformer.errors import UserError

Example = tuple[Sequence[int], Sequence[int]]


def example_lengths(examples: Sequence[Example]) -> tuple[list[int], list[int]]:
    """(source lengths, target lengths) as `collate` will lay them out: the target gains <s> or </s>."""
    return [len(src) for src, _ in examples], [len(tgt) + 1 for _, tgt in examples]


def limit_lengths(
    examples: Sequence[Example], *, max_len: int, overflow: Literal["drop", "truncate"] = "drop"
) -> tuple[list[Example], int]:
    """Keep every tensor within `max_len` positions (source <= max_len, target <= max_len - 1 tokens).

    overflow="drop" leaves out a too-long example, "truncate" cuts it. Returns the examples and how many were
    dropped or truncated, so the caller can report it.
    """
    if max_len < 2:
        raise UserError(f"max_len={max_len} must be at least 2 (one target token plus <s> or </s>)")
    if overflow not in ("drop", "truncate"):
        raise UserError(f"overflow={overflow!r} is not allowed; choose one of drop, truncate")
    kept, n_over = [], 0
    for src, tgt in examples:
        if len(src) <= max_len and len(tgt) < max_len:
            kept.append((src, tgt))
            continue
        n_over += 1
        if overflow == "truncate":
            kept.append((src[:max_len], tgt[: max_len - 1]))
    return kept, n_over


class TokenBatchSampler:
    """Batches of example indices, each within a padded-token budget, in a seeded order per epoch.

    An example's size is the longer of its source and target tensor lengths; a batch of n examples costs
    n x (largest size in it) <= `max_tokens`. Sorting by size (ties broken at random, per epoch) keeps
    similar lengths together so little of the budget is padding.

    Usable as a `torch.utils.data.DataLoader(batch_sampler=...)`: call `set_epoch(epoch, start=i)` before
    iterating, like `DistributedSampler.set_epoch`, where `start` skips the batches already trained on.

    A length curriculum (Platanios et al. 2019, https://arxiv.org/abs/1903.09848, in its simplest form):
    for the first `curriculum_epochs` epochs the batches come roughly from the shortest examples to the
    longest (each batch's place is its length rank plus noise of half the epoch), so a young model first
    learns from sentences it can align, then from the rest; later epochs are shuffled as usual.
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int],
        *,
        max_tokens: int,
        max_examples: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        curriculum_epochs: int = 0,
    ) -> None:
        if len(src_lengths) != len(tgt_lengths):
            raise UserError(f"{len(src_lengths)} source lengths but {len(tgt_lengths)} target lengths")
        if max_tokens < 1:
            raise UserError(f"max_tokens={max_tokens} must be a positive integer")
        if max_examples is not None and max_examples < 1:
            raise UserError(f"max_examples={max_examples} must be a positive integer or None")
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64).reshape(-1)
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64).reshape(-1)
        self.sizes = np.maximum(self.src_lengths, self.tgt_lengths)
        if len(self.sizes) and self.sizes.max() > max_tokens:
            i = int(self.sizes.argmax())
            raise UserError(f"example {i} is {self.sizes[i]} tokens long, more than "
                             f"max_tokens={max_tokens}; drop or truncate long examples first (limit_lengths)")
        self.max_tokens, self.max_examples = max_tokens, max_examples
        if curriculum_epochs < 0:
            raise UserError(f"curriculum_epochs={curriculum_epochs} must be >= 0")
        self.shuffle, self.seed, self.curriculum_epochs = shuffle, seed, curriculum_epochs
        self.epoch, self.start = 0, 0
        self._cache: tuple[int, list[list[int]]] | None = None

    @classmethod
    def for_examples(
        cls,
        examples: Sequence[Example],
        *,
        max_tokens: int,
        max_examples: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        curriculum_epochs: int = 0,
    ) -> TokenBatchSampler:
        """A sampler over tokenized (source ids, target ids) examples, measured as `collate` pads them."""
        src_lengths, tgt_lengths = example_lengths(examples)
        return cls(src_lengths, tgt_lengths, max_tokens=max_tokens, max_examples=max_examples,
                   shuffle=shuffle, seed=seed, curriculum_epochs=curriculum_epochs)

    def batches_for_epoch(self, epoch: int) -> list[list[int]]:
        """Every example index exactly once, packed into batches; a pure function of (seed, epoch)."""
        if self._cache is not None and self._cache[0] == epoch:
            return [list(b) for b in self._cache[1]]
        rng = np.random.default_rng([self.seed, epoch])
        tiebreak = rng.permutation(len(self.sizes)) if self.shuffle else np.arange(len(self.sizes))
        # np.lexsort sorts by its last key first: size, then source, then target length, then at random.
        order = np.lexsort((tiebreak, self.tgt_lengths, self.src_lengths, self.sizes))
        batches = self._pack(order.tolist())  # from the shortest examples to the longest
        if self.shuffle and epoch < self.curriculum_epochs:
            place = np.arange(len(batches)) + rng.uniform(0, len(batches) / 2, len(batches))
            batches = [batches[i] for i in np.argsort(place, kind="stable")]
        elif self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._cache = (epoch, batches)
        return [list(b) for b in batches]

    def _pack(self, order: list[int]) -> list[list[int]]:
        """Greedily fill batches from the sorted indices until one more would break the budget."""
        batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        for i in order:
            size = int(self.sizes[i])
            full = self.max_examples is not None and len(batch) == self.max_examples
            if batch and (full or (len(batch) + 1) * max(longest, size) > self.max_tokens):
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, size)
        if batch:
            batches.append(batch)
        return batches

    def set_epoch(self, epoch: int, *, start: int = 0) -> None:
        """Iterate epoch `epoch` from its batch `start` on (to resume a run mid-epoch)."""
        self.epoch, self.start = epoch, start

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches_for_epoch(self.epoch)[self.start :]

    def __len__(self) -> int:
        return max(len(self.batches_for_epoch(self.epoch)) - self.start, 0)


@dataclass
class Batch:
    """Padded id tensors for teacher forcing: the decoder reads `tgt_in` and is trained to emit `tgt_out`."""

    src: Tensor  # (B, S) source ids
    tgt_in: Tensor  # (B, T) <s> + target
    tgt_out: Tensor  # (B, T) target + </s>
    n_target_tokens: int  # non-pad positions of tgt_out, to normalise a summed loss

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Batch:
        return Batch(src=self.src.to(device, non_blocking=non_blocking),
                     tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
                     tgt_out=self.tgt_out.to(device, non_blocking=non_blocking),
                     n_target_tokens=self.n_target_tokens)

    def pin_memory(self) -> Batch:
        """Called by DataLoader(pin_memory=True)."""
        return Batch(src=self.src.pin_memory(), tgt_in=self.tgt_in.pin_memory(),
                     tgt_out=self.tgt_out.pin_memory(), n_target_tokens=self.n_target_tokens)

    def __len__(self) -> int:
        return self.src.shape[0]


def collate(examples: Sequence[Example], *, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> Batch:
    """Pad a list of (source ids, target ids) into a `Batch`, adding <s> to `tgt_in` and </s> to `tgt_out`."""
    if not examples:
        raise UserError("cannot collate an empty list of examples")
    src = pad([x for x, _ in examples], pad_id)  # (B, S)
    tgt_in = pad([[bos_id, *y] for _, y in examples], pad_id)  # (B, T)
    tgt_out = pad([[*y, eos_id] for _, y in examples], pad_id)  # (B, T)
    n_target_tokens = sum(len(y) + 1 for _, y in examples)
    return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, n_target_tokens=n_target_tokens)
