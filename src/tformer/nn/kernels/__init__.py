"""Attention kinds: one signature; `tformer.models.builders.KERNELS` maps `attention.kind` to them, once,
when a layer is built.

    kernel(q, k, v, *, mask, causal, scale, bias, dropout, cache) -> (out, weights | None)

q (B, H, T, D); k, v (B, Hk, S, D) with Hk dividing H (grouped-query); mask bool broadcastable to
(B, H, T, S), True = attend; bias float broadcastable to (B, H, T, S), added to the scores (ALiBi);
out (B, H, T, D). See `base.py` for the details every kind shares. The eager softmax(QK^T / sqrt(k)) V is
the reference every other kind is tested against: exact kinds to 1e-5, approximate ones within a stated
bound. The state-space mixer replaces the whole attention module and lives in `tformer.nn.ssm`.
"""

from tformer.nn.kernels.base import Kernel
from tformer.nn.kernels.eager import eager_attention
from tformer.nn.kernels.exact import ExactAttention
from tformer.nn.kernels.linear import LinearAttention
from tformer.nn.kernels.lowrank import LowRankAttention
from tformer.nn.kernels.lsh import LSHAttention
from tformer.nn.kernels.sdpa import sdpa_attention
from tformer.nn.kernels.sparse import SparseAttention
from tformer.nn.kernels.windowed import WindowedAttention

__all__ = ["ExactAttention", "Kernel", "LSHAttention", "LinearAttention", "LowRankAttention", "SparseAttention",
           "WindowedAttention", "eager_attention", "sdpa_attention"]
