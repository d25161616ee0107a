"""Weight layout for decoding one row at a time on a CPU.

Decoding a single row multiplies each weight matrix by a vector. `nn.Linear` stores its weight as
(out, in), rows contiguous, and computes x @ W^T; CPU BLAS libraries often do that product markedly slower
than x @ M with M (in, out) contiguous (GPT-2's Conv1D stores its weights that way). So while decoding one
row we keep every linear weight's values, shape and state-dict key but store it as the transpose of a
contiguous (in, out) matrix (column-major), and put the ordinary layout back afterwards. With a few rows the
same layout is slower, so `decoding.steps.eval_mode` asks for it only when one row is decoded; on a GPU the
layout is left alone. What it gains is measured by `benchmarks/generate.py` (README, "Speed").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


def _linear_weights(model: nn.Module) -> list[nn.Parameter]:
    """Each nn.Linear weight once (a tied output layer shares the embedding's)."""
    seen, weights = set(), []
    for module in model.modules():
        if isinstance(module, nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            weights.append(module.weight)
    return weights


@contextmanager
def decoding_layout(model: nn.Module) -> Iterator[None]:
    """Within the body, every linear weight on the CPU is column-major (same values); after it, row-major."""
    weights = [w for w in _linear_weights(model) if w.device.type == "cpu" and w.is_contiguous()]
    # Decoders run under inference mode; copies made there would be inference tensors that training could
    # not use afterwards, so the copies are made with it switched off.
    with torch.inference_mode(False), torch.no_grad():
        for w in weights:
            w.data = w.data.t().contiguous().t()  # (out, in) view of a contiguous (in, out) matrix
    try:
        yield
    finally:
        with torch.inference_mode(False), torch.no_grad():
            for w in weights:
                w.data = w.data.contiguous()
