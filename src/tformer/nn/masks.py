"""Attention masks. Convention: a boolean tensor broadcastable to (B, H, T, S), True where a query may
attend to a key. Padding and causal masks combine with `&`.

B batch, H heads, T query length, S key length.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, S) token ids -> (B, S) True at real tokens."""
    return ids != pad_id


def causal_mask(t: int, s: int, *, device: torch.device | None = None) -> Tensor:
    """(T, S) True where key index <= query index, the queries being the last T of S positions."""
    q = torch.arange(s - t, s, device=device)[:, None]  # (T, 1)
    k = torch.arange(s, device=device)[None, :]  # (1, S)
    return k <= q


def attention_mask(
    t: int,
    key_valid: Tensor | None = None,
    *,
    causal: bool = False,
    s: int | None = None,
    device: torch.device | None = None,
) -> Tensor | None:
    """Combine a key-padding mask (B, S) and causality into one (B|1, 1, T, S) mask, or None if nothing
    is masked (so the caller can take the fastest kernel)."""
    if key_valid is not None:
        s = key_valid.shape[-1]
        device = key_valid.device
    s = t if s is None else s
    mask = None
    if key_valid is not None:
        mask = key_valid[:, None, None, :]  # (B, 1, 1, S)
    if causal:
        c = causal_mask(t, s, device=device)[None, None]  # (1, 1, T, S)
        mask = c if mask is None else mask & c
    return mask


def check_mask(mask: Tensor, batch: int, t: int, s: int) -> None:
    """Raise ValueError unless `mask` broadcasts to (batch, H, t, s)."""
    shape = tuple(mask.shape)
    ok = mask.dim() == 4 and shape[2] in (1, t) and shape[3] == s and shape[0] in (1, batch)
    if not ok or mask.dtype != torch.bool:
        raise ValueError(
            f"attention mask of shape {shape} and dtype {mask.dtype} is wrong; expected a bool tensor "
            f"broadcastable to (B={batch}, H, T={t}, S={s})"
        )
