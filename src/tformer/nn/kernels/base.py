"""What every attention kind shares: the `Kernel` module interface and three small helpers.

    kernel(q, k, v, *, mask, causal, scale, bias, dropout, cache) -> (out, weights | None)

q (B, H, T, D); k, v (B, Hk, S, D), Hk dividing H; the T queries are the last T of the S positions
(T = S in training, T < S when decoding with a cache). mask bool broadcastable to (B, H, T, S), True =
attend; the structured kinds (windowed, sparse, linear, LSH) take only a key-padding mask of shape
(B|1, 1, 1, S), which is what the models pass. bias float broadcastable to (B, H, T, S) (ALiBi; exact
kinds only). cache: the kind's own decoding state from `new_cache` (None: no cache).

A kernel that attends to part of the keys at a time computes partial results `(out, lse)` with
`softmax_partial`: the output normalised over that part and the log-sum-exp of its scores, (B, H, T).
`merge_partials` combines parts into the softmax over their union, exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tformer.nn.kv_cache import KVCache


class Kernel(nn.Module):
    """Base class: by default a growing key/value cache, then `attend` over everything cached."""

    shared_qk = False  # True: keys are the normalised queries (Reformer); the layer has no k_proj
    causal_ok = True  # False: the kind mixes positions (Linformer) and cannot be causal
    exact = False  # True: softmax over every allowed key (reference-equal, can record weights)

    def new_cache(self, *, batch: int, n_kv_heads: int, max_len: int, head_dim: int,
                  dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> KVCache:
        return KVCache(batch=batch, n_kv_heads=n_kv_heads, max_len=max_len, head_dim=head_dim,
                       dtype=dtype, device=device)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None, causal: bool = False,
                scale: float, bias: Tensor | None = None, dropout: float = 0.0,
                cache: KVCache | None = None) -> tuple[Tensor, Tensor | None]:
        if cache is not None:
            k, v = cache.update(k, v)  # (B, Hk, S, D): everything so far
        return self.attend(q, k, v, mask=mask, causal=causal, scale=scale, bias=bias, dropout=dropout)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool, scale: float,
               bias: Tensor | None, dropout: float) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError


def key_valid(mask: Tensor | None, batch: int, s: int, *, kind: str) -> Tensor | None:
    """(B|1, 1, 1, S) key-padding mask -> (B, S) bool, or None. A mask that varies by query is an error:
    the structured kinds never build the T x S matrix it would need."""
    if mask is None:
        return None
    if mask.dim() != 4 or mask.shape[1:3] != (1, 1) or mask.shape[3] != s or mask.dtype != torch.bool:
        raise ValueError(f"{kind} attention takes a bool key-padding mask of shape (B, 1, 1, S={s}), "
                         f"got {tuple(mask.shape)} {mask.dtype}; causality goes in `causal`")
    return mask[:, 0, 0, :].expand(batch, s)  # (B, S)


def repeat_kv(x: Tensor, n_heads: int) -> Tensor:
    """(B, Hk, S, D) -> (B, H, S, D): each key/value head serves H / Hk query heads (grouped-query)."""
    groups = n_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def merge_partials(parts: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Softmax over the union of disjoint key sets, from each set's (out (B, H, T, D), lse (B, H, T))."""
    lses = torch.stack([lse for _, lse in parts])  # (P, B, H, T)
    lse = torch.logsumexp(lses, dim=0)  # (B, H, T)
    weights = torch.exp(lses - lse)  # (P, B, H, T)
    out = sum(w[..., None] * o for w, (o, _) in zip(weights, parts, strict=True))
    return out, lse


def softmax_partial(scores: Tensor, allowed: Tensor, v: Tensor, *, dropout: float = 0.0) -> tuple[Tensor, Tensor]:
    """scores (..., T, S), allowed bool broadcastable to them, v (..., S, D) -> (out (..., T, D), lse (..., T)).

    Disallowed scores get a large finite negative value, not -inf, so that a query with no allowed key
    (a padded position) gives zeros with finite gradients instead of NaN; its lse is then about
    `NEG`, so it weighs nothing when merged with a part that has keys."""
    neg = torch.finfo(scores.dtype).min / 2
    scores = scores.masked_fill(~allowed, neg)
    lse = torch.logsumexp(scores, dim=-1)  # (..., T)
    probs = torch.exp(scores - lse[..., None]) * allowed  # (..., T, S); all-zero rows where nothing allowed
    if dropout > 0:
        probs = nn.functional.dropout(probs, p=dropout)
    return probs @ v, lse
