"""The reference kernel, written as the notes write it: softmax(Q K^T / sqrt(k)) V.
Shapes: see `tformer.nn.kernels`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float,
    bias: Tensor | None = None,
    dropout: float = 0.0,
) -> tuple[Tensor, Tensor]:
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # grouped-query: each key/value head serves `groups` query heads
        k = k.repeat_interleave(groups, dim=1)  # (B, H, S, D)
        v = v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if causal:
        t, s = scores.shape[-2:]
        keep = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, T, S); rows with no key are NaN, zeroed by the caller
    weights = torch.nan_to_num(weights, nan=0.0)
    out = F.dropout(weights, p=dropout) @ v if dropout > 0 else weights @ v  # (B, H, T, D)
    return out, weights
