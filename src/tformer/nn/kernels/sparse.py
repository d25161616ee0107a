"""Sparse attention: the factorised patterns of Child et al. 2019, "Generating Long Sequences with Sparse
Transformers" (https://arxiv.org/abs/1904.10509), section 4.

    strided:  A1 = local   0 <= i - j < l   (|i - j| < l bidirectional)
              A2 = column  (i - j) % l == 0  (j <= i if causal)
    fixed:    A1 = block   j // l == i // l  (j <= i if causal)
              A2 = summary j % l >= l - c    (j <= i if causal)

Each query attends to the union A1 | A2 in one softmax. Each part is scored only where it can be non-zero
and gives a partial (out, lse); `merge_partials` combines them exactly. The keys the parts share are
counted once: A2 leaves them out (strided: j == i; fixed: the summary keys of the query's own block).

Notation: B batch, H heads, T queries, S keys, D head width, l block (stride), c summary width,
R = ceil(S / l) rows of the position grid (position = row * l + column), Q the rows holding queries.
The T queries are the last T of the S positions; they are left-padded to a block boundary so that they
lie on the same grid as the keys. Cost: strided T (2l + S / l), fixed T (l + c S / l) scores.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tformer.errors import UserError
from tformer.nn.kernels.base import Kernel, key_valid, merge_partials, repeat_kv, softmax_partial
from tformer.nn.kernels.windowed import positions, window_partial

PATTERNS = ("strided", "fixed")


def query_grid(q: Tensor, s: int, l: int) -> tuple[Tensor, int]:
    """(B, H, T, D) queries at positions S - T.. -> (B, H, Q, l, D) on the position grid from the block
    holding the first query, and that block's first position."""
    b, h, t, d = q.shape
    start = (s - t) // l * l
    end = -(-s // l) * l
    grid = positions(q, start - (s - t), end - (s - t), dim=2)  # (B, H, Q * l, D)
    return grid.view(b, h, (end - start) // l, l, d), start


def from_grid(out: Tensor, lse: Tensor, *, offset: int, t: int) -> tuple[Tensor, Tensor]:
    """(B, H, Q, l, D), (B, H, Q, l) -> the T queries' (B, H, T, D), (B, H, T); `offset` padding rows first."""
    b, h, n, l, d = out.shape
    out = out.reshape(b, h, n * l, d)[:, :, offset:offset + t]  # (B, H, T, D)
    return out, lse.reshape(b, h, n * l)[:, :, offset:offset + t]


def column_partial(q: Tensor, k: Tensor, v: Tensor, *, block: int, causal: bool, valid: Tensor,
                   scale: float, dropout: float) -> tuple[Tensor, Tensor]:
    """Strided A2 minus j == i: each query scores only the R keys of its column i % l."""
    b, h, t, _ = q.shape
    s, l = k.shape[2], block
    if t < l:  # decoding: fewer queries than columns
        return column_gather(q, k, v, block=block, causal=causal, valid=valid, scale=scale, dropout=dropout)
    qg, start = query_grid(q, s, l)  # (B, H, Q, l, D)
    end = start + qg.shape[2] * l
    kg = positions(k, 0, end, dim=2).view(b, h, -1, l, k.shape[-1]).transpose(2, 3)  # (B, H, l, R, D)
    vg = positions(v, 0, end, dim=2).view(b, h, -1, l, v.shape[-1]).transpose(2, 3)  # (B, H, l, R, D)
    ok = positions(valid, 0, end, dim=1).view(valid.shape[0], -1, l).transpose(1, 2)  # (B|1, l, R)

    q_row = torch.arange(start // l, end // l, device=q.device)[:, None]  # (Q, 1)
    k_row = torch.arange(end // l, device=q.device)[None, :]  # (1, R)
    rows = k_row < q_row if causal else k_row != q_row  # (Q, R): i - j = (q_row - k_row) l, never 0
    scores = (qg.transpose(2, 3) @ kg.transpose(-1, -2)) * scale  # (B, H, l, Q, R)
    out, lse = softmax_partial(scores, rows & ok[:, None, :, None, :], vg, dropout=dropout)
    return from_grid(out.transpose(2, 3), lse.transpose(2, 3), offset=s - t - start, t=t)


def column_gather(q: Tensor, k: Tensor, v: Tensor, *, block: int, causal: bool, valid: Tensor,
                  scale: float, dropout: float) -> tuple[Tensor, Tensor]:
    """`column_partial` for T < l: gather each query's R column keys (T R of them, not all S)."""
    t, s, l = q.shape[2], k.shape[2], block
    i = torch.arange(s - t, s, device=q.device)[:, None]  # (T, 1)
    row = torch.arange(-(-s // l), device=q.device)[None, :]  # (1, R)
    j = i % l + row * l  # (T, R): the keys of query i's column
    inside = j < s
    j = j.clamp(max=s - 1)
    rows = row < i // l if causal else row != i // l  # (T, R): never j == i
    allowed = (rows & inside & valid[:, j])[:, None, :, None, :]  # (B|1, 1, T, 1, R)
    scores = (q[:, :, :, None] @ k[:, :, j].transpose(-1, -2)) * scale  # (B, H, T, 1, R)
    out, lse = softmax_partial(scores, allowed, v[:, :, j], dropout=dropout)  # v[:, :, j] (B, H, T, R, D)
    return out[:, :, :, 0], lse[:, :, :, 0]  # (B, H, T, D), (B, H, T)


def block_partial(q: Tensor, k: Tensor, v: Tensor, *, block: int, causal: bool, valid: Tensor,
                  scale: float, dropout: float) -> tuple[Tensor, Tensor]:
    """Fixed A1: each query scores the l keys of its own block."""
    b, h, t, _ = q.shape
    s, l = k.shape[2], block
    if t < l:  # decoding: the queries lie in one or two blocks; score them against those keys directly
        start = (s - t) // l * l
        i = torch.arange(s - t, s, device=q.device)[:, None]  # (T, 1)
        j = torch.arange(start, s, device=q.device)[None, :]  # (1, < 2l)
        same = (j // l == i // l) & (j <= i) if causal else j // l == i // l  # (T, < 2l)
        scores = (q @ k[:, :, start:].transpose(-1, -2)) * scale  # (B, H, T, < 2l)
        return softmax_partial(scores, same & valid[:, None, None, start:], v[:, :, start:], dropout=dropout)

    qg, start = query_grid(q, s, l)  # (B, H, Q, l, D)
    end = start + qg.shape[2] * l
    kb = positions(k, start, end, dim=2).view(b, h, -1, l, k.shape[-1])  # (B, H, Q, l, D)
    vb = positions(v, start, end, dim=2).view(b, h, -1, l, v.shape[-1])  # (B, H, Q, l, D)
    ok = positions(valid, start, end, dim=1).view(valid.shape[0], -1, l)  # (B|1, Q, l)

    keep = torch.ones(l, l, dtype=torch.bool, device=q.device)
    keep = keep.tril() if causal else keep  # (l, l)
    scores = (qg @ kb.transpose(-1, -2)) * scale  # (B, H, Q, l, l)
    out, lse = softmax_partial(scores, keep & ok[:, None, :, None, :], vb, dropout=dropout)
    return from_grid(out, lse, offset=s - t - start, t=t)


def summary_partial(q: Tensor, k: Tensor, v: Tensor, *, block: int, summary: int, causal: bool,
                    valid: Tensor, scale: float, dropout: float) -> tuple[Tensor, Tensor]:
    """Fixed A2 minus the query's own block: every query scores the last c keys of each block (R c keys)."""
    t, s, l, c = q.shape[2], k.shape[2], block, summary
    j = torch.arange(-(-s // l) * l, device=q.device).view(-1, l)[:, l - c:].flatten()  # (R c,) summary keys
    j = j[j < s]
    q_block = (torch.arange(s - t, s, device=q.device) // l)[:, None]  # (T, 1)
    k_block = (j // l)[None, :]  # (1, R c)
    blocks = k_block < q_block if causal else k_block != q_block  # (T, R c)
    scores = (q @ k[:, :, j].transpose(-1, -2)) * scale  # (B, H, T, R c)
    return softmax_partial(scores, blocks & valid[:, None, None, j], v[:, :, j], dropout=dropout)


class SparseAttention(Kernel):
    """The strided or fixed pattern of the Sparse Transformer, both parts in one exact softmax. Takes only a
    key-padding mask; the default key/value cache (decoding scores O(l + S / l) keys per token)."""

    def __init__(self, *, pattern: str, block: int, summary: int) -> None:
        super().__init__()
        if pattern not in PATTERNS:
            raise UserError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
        if block < 1:
            raise UserError(f"block must be >= 1, got {block}")
        if not 1 <= summary <= block:
            raise UserError(f"summary must be in 1..block={block}, got {summary}")
        self.pattern, self.block, self.summary = pattern, block, summary

    def extra_repr(self) -> str:
        summary = f", summary={self.summary}" if self.pattern == "fixed" else ""
        return f"pattern={self.pattern}, block={self.block}{summary}"

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool, scale: float,
               bias: Tensor | None, dropout: float) -> tuple[Tensor, None]:
        if bias is not None:
            raise UserError("sparse attention takes no bias (ALiBi is for the exact kernels)")
        b, h = q.shape[:2]
        s = k.shape[2]
        valid = key_valid(mask, b, s, kind="sparse")  # (B, S) or None
        if valid is None:
            valid = torch.ones(1, s, dtype=torch.bool, device=q.device)
        k, v = repeat_kv(k, h), repeat_kv(v, h)  # (B, H, S, D)
        common = dict(causal=causal, valid=valid, scale=scale, dropout=dropout)
        if self.pattern == "strided":
            local = window_partial(q, k, v, window=self.block - 1, **common)
            other = column_partial(q, k, v, block=self.block, **common)
        else:
            local = block_partial(q, k, v, block=self.block, **common)
            other = summary_partial(q, k, v, block=self.block, summary=self.summary, **common)
        out, _ = merge_partials([local, other])
        return out, None
