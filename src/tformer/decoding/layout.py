"""Weight layout for decoding one row at a time on a CPU.

Decoding a single row multiplies each weight matrix by a vector. `nn.Linear` stores its weight as
(out, in), rows contiguous, and computes x @ W^T; CPU BLAS libraries often do that product markedly slower
than x @ M with M (in, out) contiguous (GPT-2's Conv1D stores its weights that way). So while decoding one
row we keep every linear weight's values, shape and state-dict key but store it as the transpose of a
contiguous (in, out) matrix (column-major), and put the ordinary layout back afterwards. With a few rows the
same layout is slower, so `decoding.steps.eval_mode` asks for it only when one row is decoded; on a GPU the
layout is left alone. What it gains is measured by `benchmarks/generate.py` and `benchmarks/decode_profile.py`.

A `DecodingLayout` belongs to one model and to whoever holds that model for decoding (`inference.Loaded`,
and so the server): it makes the column-major copies on first use and keeps them for later calls while each
weight is unchanged, so going in and out of the layout swaps tensors and copies nothing. The copies are a
second set of the linear weights in memory, released with the layout. A decoder called without one makes
a layout for that call alone: the copies are made once per call and dropped after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


class DecodingLayout:
    """Column-major copies of `model`'s linear weights on the CPU, swapped in by `applied()`.

    A copy is reused while its weight still holds the data it was made from, unchanged: the same tensor
    (held here, so its memory cannot be reused for another) at the same version (torch counts every in-place
    change of a tensor, an optimizer step or `load_state_dict` included). Anything else makes a new copy."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._copies: dict[str, tuple[Tensor, int, Tensor]] = {}  # name -> (data copied, its version, copy)

    def _linear_weights(self) -> list[tuple[str, nn.Parameter]]:
        """(name, weight) of each nn.Linear on the CPU, each weight once (a tied output layer shares the
        embedding's)."""
        seen, weights = set(), []
        for name, module in self.model.named_modules():
            if not isinstance(module, nn.Linear):
                continue
            w = module.weight
            if w.device.type == "cpu" and w.is_contiguous() and id(w) not in seen:
                seen.add(id(w))
                weights.append((name, w))
        return weights

    def _column_major(self, name: str, w: nn.Parameter) -> Tensor:
        """The (out, in) view of a contiguous (in, out) copy of `w`: made once, reused while `w` is unchanged."""
        kept = self._copies.get(name)
        same = kept is not None and (kept[0].data_ptr(), kept[0].shape, kept[0].dtype, kept[1]) == (
            w.data_ptr(), w.shape, w.dtype, w._version)
        if not same:
            kept = (w.data, w._version, w.data.t().contiguous().t())
            self._copies[name] = kept
        return kept[2]

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Within the body, every linear weight on the CPU is column-major (same values); after it, the
        very tensors it had before."""
        weights = self._linear_weights()
        # Decoders run under inference mode; copies made there would be inference tensors that training could
        # not use afterwards, so the copies are made with it switched off.
        with torch.inference_mode(False), torch.no_grad():
            originals = [w.data for _, w in weights]
            for name, w in weights:
                w.data = self._column_major(name, w)
        try:
            yield
        finally:
            for (_, w), original in zip(weights, originals, strict=True):
                w.data = original  # nothing is copied

    def clear(self) -> None:
        """Drop the copies (the next `applied()` makes them again)."""
        self._copies.clear()
