"""Attention kinds: one signature, one registry, chosen once when a layer is built.

    kernel(q, k, v, *, mask, causal, scale, bias, dropout, cache) -> (out, weights | None)

q (B, H, T, D); k, v (B, Hk, S, D) with Hk dividing H (grouped-query); mask bool broadcastable to
(B, H, T, S), True = attend; bias float broadcastable to (B, H, T, S), added to the scores (ALiBi);
out (B, H, T, D). See `base.py` for the details every kind shares. The eager softmax(QK^T / sqrt(k)) V is
the reference every other kind is tested against: exact kinds to 1e-5, approximate ones within a stated
bound. The state-space mixer replaces the whole attention module and lives in `tformer.nn.ssm`.
"""

from collections.abc import Callable

from tformer.config import AttentionConfig
from tformer.nn.kernels.base import Kernel
from tformer.nn.kernels.eager import eager_attention
from tformer.nn.kernels.exact import ExactAttention
from tformer.nn.kernels.linear import LinearAttention
from tformer.nn.kernels.lowrank import LowRankAttention
from tformer.nn.kernels.lsh import LSHAttention
from tformer.nn.kernels.sdpa import sdpa_attention
from tformer.nn.kernels.sparse import SparseAttention
from tformer.nn.kernels.windowed import WindowedAttention

KERNELS: dict[str, Callable[[AttentionConfig, int], Kernel]] = {
    "sdpa": lambda c, n: ExactAttention(fused=True),
    "eager": lambda c, n: ExactAttention(fused=False),
    "windowed": lambda c, n: WindowedAttention(window=c.window),
    "sparse": lambda c, n: SparseAttention(pattern=c.pattern, block=c.block, summary=c.summary),
    "lowrank": lambda c, n: LowRankAttention(rank=c.rank, max_len=n),
    "linear": lambda c, n: LinearAttention(chunk=c.chunk),
    "lsh": lambda c, n: LSHAttention(buckets=c.buckets, rounds=c.rounds, chunk=c.chunk, seed=c.seed),
}


def build_kernel(config: AttentionConfig, *, max_len: int) -> Kernel:
    """The kernel for `config.kind` (every kind but "ssm", which is not attention)."""
    if config.kind not in KERNELS:
        raise ValueError(f"attention.kind={config.kind!r} is not an attention kernel; "
                         f"choose one of {', '.join(KERNELS)}")
    return KERNELS[config.kind](config, max_len)


__all__ = ["KERNELS", "ExactAttention", "Kernel", "build_kernel", "eager_attention", "sdpa_attention"]
