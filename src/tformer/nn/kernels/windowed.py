"""Restricted (windowed) self-attention: each query sees only the keys within r positions of it.

Vaswani et al. 2017, "Attention Is All You Need", section 4 and Table 1 (https://arxiv.org/abs/1706.03762):
"self-attention could be restricted to considering only a neighborhood of size r", cost O(r n d).

    query i, key j (absolute positions):  |i - j| <= r          (bidirectional)
                                          0 <= i - j <= r       (causal)

Notation: B batch, H heads, T queries, S keys, D head width, r window, w query block, P = w + 2r (w + r if
causal) the key span of one block, N the number of query blocks. The T queries are the last T of the S
positions. Queries are cut into N blocks of w, aligned to end at the last query; block n sees the P keys
from its first position - r on, gathered by `Tensor.unfold` (a strided view, no copy, no Python loop), so
the scores are (B, H, N, w, P): about T (w + 2r) of them, never T x S. Decoding one token costs O(r d).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tformer.errors import UserError
from tformer.nn.kernels.base import Kernel, key_valid, repeat_kv, softmax_partial

MIN_BLOCK = 16  # query block floor: small windows still get matmuls of a useful size


def positions(x: Tensor, start: int, stop: int, *, dim: int) -> Tensor:
    """Rows start..stop-1 of `x` along `dim`, zero (False) where they fall outside 0..len-1. Padding at
    either end is how the blockwise kernels keep every block the same shape."""
    n = x.shape[dim]
    lo, hi = min(max(start, 0), n), max(min(stop, n), 0)

    def zeros(m: int) -> Tensor:
        shape = list(x.shape)
        shape[dim] = max(m, 0)
        return x.new_zeros(shape)

    body = x.narrow(dim, lo, max(hi - lo, 0))
    return torch.cat([zeros(min(lo, stop) - start), body, zeros(stop - max(hi, start))], dim=dim)


def window_partial(q: Tensor, k: Tensor, v: Tensor, *, window: int, causal: bool, valid: Tensor | None,
                   scale: float, dropout: float = 0.0) -> tuple[Tensor, Tensor]:
    """Softmax over the keys within `window` of each query, as a partial (out (B, H, T, D), lse (B, H, T)).

    q (B, H, T, D); k, v (B, H, S, D), already one per query head; valid (B, S) bool or None."""
    b, h, t, d = q.shape
    s = k.shape[2]
    r = max(min(window, s - 1), 0)  # a wider window sees every key
    w = max(min(max(r, MIN_BLOCK), t), 1)  # (w <= T: decoding T = 1 scores one block of 1 + 2r keys)
    n = -(-t // w)
    first = s - n * w  # absolute position of the first (padded) query
    right = 0 if causal else r  # keys after the last query that a block can see
    span = w + right + r
    if valid is None:
        valid = torch.ones(1, s, dtype=torch.bool, device=q.device)

    qb = positions(q, t - n * w, t, dim=2).view(b, h, n, w, d)  # (B, H, N, w, D), left-padded
    kb = positions(k, first - r, s + right, dim=2).unfold(2, span, w).transpose(-1, -2)  # (B, H, N, P, D)
    vb = positions(v, first - r, s + right, dim=2).unfold(2, span, w).transpose(-1, -2)  # (B, H, N, P, D)
    ok = positions(valid, first - r, s + right, dim=1).unfold(1, span, w)  # (B|1, N, P); padding False

    diff = band_offsets(w, span, r=r, device=q.device)  # (w, P): i - j
    near = (diff >= 0) & (diff <= r) if causal else diff.abs() <= r
    scores = (qb @ kb.transpose(-1, -2)) * scale  # (B, H, N, w, P)
    out, lse = softmax_partial(scores, near & ok[:, None, :, None, :], vb, dropout=dropout)
    out = out.reshape(b, h, n * w, d)[:, :, n * w - t:]  # (B, H, T, D): padding rows dropped
    return out, lse.reshape(b, h, n * w)[:, :, n * w - t:]  # (B, H, T)


def band_offsets(w: int, span: int, *, r: int, device: torch.device) -> Tensor:
    """(w, P) i - j for query a of a block against key c of its span, which starts r before the block."""
    a = torch.arange(w, device=device)[:, None]
    c = torch.arange(span, device=device)[None, :]
    return a + r - c


class WindowedAttention(Kernel):
    """Each query attends to the keys within `window` positions (before it only, if causal). Takes only a
    key-padding mask; the default key/value cache, of which decoding reads the last window + 1 keys."""

    def __init__(self, *, window: int) -> None:
        super().__init__()
        if window < 0:
            raise UserError(f"window must be >= 0, got {window}")
        self.window = window

    def extra_repr(self) -> str:
        return f"window={self.window}"

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool, scale: float,
               bias: Tensor | None, dropout: float) -> tuple[Tensor, None]:
        if bias is not None:
            raise UserError("windowed attention takes no bias (ALiBi is for the exact kernels)")
        b, h, t = q.shape[:3]
        s = k.shape[2]
        valid = key_valid(mask, b, s, kind="windowed")  # (B, S) or None
        first = max(s - t - self.window, 0)  # no query sees a key before this: decoding reads O(window) keys
        k, v = repeat_kv(k[:, :, first:], h), repeat_kv(v[:, :, first:], h)  # (B, H, S - first, D)
        valid = None if valid is None else valid[:, first:]
        out, _ = window_partial(q, k, v, window=self.window, causal=causal, valid=valid, scale=scale,
                                dropout=dropout)
        return out, None
