"""Attention kernels: one signature, one registry.

    kernel(q, k, v, *, mask, causal, scale, bias, dropout) -> (out, weights | None)

q (B, H, T, D); k, v (B, Hk, S, D) with Hk dividing H (grouped-query); mask bool broadcastable to
(B, H, T, S), True = attend; bias float broadcastable to (B, H, T, S), added to the scores (ALiBi);
out (B, H, T, D). `eager` is the reference every other kernel is tested against.
"""

from tformer.nn.kernels.eager import eager_attention
from tformer.nn.kernels.sdpa import sdpa_attention

KERNELS = {"eager": eager_attention, "sdpa": sdpa_attention}

__all__ = ["KERNELS", "eager_attention", "sdpa_attention"]
