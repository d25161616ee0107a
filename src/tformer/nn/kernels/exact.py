"""Exact attention as a `Kernel`: softmax over every allowed key, by the eager reference or by PyTorch's
fused kernel. It also turns the causal flag into a mask when the fused kernel cannot apply it itself, and
gives zeros for a query that may see no key. Shapes: see `tformer.nn.kernels.base`."""

from __future__ import annotations

from torch import Tensor

from tformer.nn.kernels.base import Kernel
from tformer.nn.kernels.eager import eager_attention
from tformer.nn.kernels.sdpa import sdpa_attention
from tformer.nn.masks import causal_mask


class ExactAttention(Kernel):
    exact = True

    def __init__(self, *, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.fn = sdpa_attention if fused else eager_attention

    def extra_repr(self) -> str:
        return f"fused={self.fused}"

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool, scale: float,
               bias: Tensor | None, dropout: float) -> tuple[Tensor, Tensor | None]:
        t, s = q.shape[2], k.shape[2]
        if causal and t == 1:  # one query, the last position: it may see every key, so nothing to mask
            causal = False
        if causal and (mask is not None or bias is not None or t != s):
            keep = causal_mask(t, s, device=q.device)[None, None]  # (1, 1, T, S); queries are the last T
            mask, causal = (keep if mask is None else mask & keep), False
        dead = None
        if mask is not None:
            dead = ~mask.any(dim=-1, keepdim=True)  # (B, 1|H, T, 1): a query that may see no key
            mask = mask | dead  # let those rows attend anywhere, then zero them below: no NaN
        out, weights = self.fn(q, k, v, mask=mask, causal=causal, scale=scale, bias=bias, dropout=dropout)
        if dead is not None:
            out = out.masked_fill(dead, 0.0)
            weights = None if weights is None else weights.masked_fill(dead, 0.0)
        return out, weights  # (B, H, T, D), (B, H, T, S) | None
