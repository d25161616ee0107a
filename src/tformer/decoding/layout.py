"""Weight layout for decoding one row at a time on a CPU.

Decoding a single row multiplies each weight matrix by a vector. `nn.Linear` stores its weight as
(out, in), rows contiguous, and computes x @ W^T; CPU BLAS libraries often do that product markedly slower
than x @ M with M (in, out) contiguous (GPT-2's Conv1D stores its weights that way). So while decoding one
row we keep every linear weight's values, shape and state-dict key but store it as the transpose of a
contiguous (in, out) matrix (column-major), and put the ordinary layout back afterwards. With a few rows the
same layout is slower, so `decoding.steps.eval_mode` asks for it only when one row is decoded; on a GPU the
layout is left alone. What it gains is measured by `benchmarks/generate.py` (README, "Speed").

The column-major copies are made once and kept for later calls (`_COPIES`), while the weight they came from
is unchanged (same storage, same version counter: an optimizer step or `load_state_dict` bumps it); going in
and out of the layout then swaps tensors and copies nothing. Making them on every call and copying back
cost 2 ms of a 14-18 ms step of batch-1 generation (`benchmarks/decode_profile.py`). The price is a second
copy of the linear weights in memory, in the processes that decode one row.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


def _linear_weights(model: nn.Module) -> list[nn.Parameter]:
    """Each nn.Linear weight once (a tied output layer shares the embedding's)."""
    seen, weights = set(), []
    for module in model.modules():
        if isinstance(module, nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            weights.append(module.weight)
    return weights


_COPIES: dict[int, tuple[Tensor, int, Tensor]] = {}
"""id(weight) -> (the data the copy was made from, the weight's version then, the column-major copy); an
entry goes when its weight does. Holding the data keeps its memory from being reused, so a weight whose data
was replaced never matches by address."""


def _column_major(w: nn.Parameter) -> Tensor:
    """The (out, in) view of a contiguous (in, out) copy of `w`: made once, reused while `w` is unchanged."""
    kept = _COPIES.get(id(w))
    if kept is None:
        weakref.finalize(w, _COPIES.pop, id(w), None)
    elif (kept[0].data_ptr(), kept[0].shape, kept[0].dtype, kept[1]) == (w.data_ptr(), w.shape, w.dtype,
                                                                         w._version):
        return kept[2]
    _COPIES[id(w)] = (w.data, w._version, w.data.t().contiguous().t())
    return _COPIES[id(w)][2]


@contextmanager
def decoding_layout(model: nn.Module) -> Iterator[None]:
    """Within the body, every linear weight on the CPU is column-major (same values); after it, row-major."""
    weights = [w for w in _linear_weights(model) if w.device.type == "cpu" and w.is_contiguous()]
    # Decoders run under inference mode; copies made there would be inference tensors that training could
    # not use afterwards, so the copies are made with it switched off.
    with torch.inference_mode(False), torch.no_grad():
        originals = [w.data for w in weights]
        for w in weights:
            w.data = _column_major(w)
    try:
        yield
    finally:
        for w, original in zip(weights, originals, strict=True):
            w.data = original  # the very tensor it had: nothing is copied
