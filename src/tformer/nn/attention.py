"""Multi-head attention as the notes write it (Vaswani et al. 2017, sec. 3.2):
    head_i = softmax(Q_i K_i^T / sqrt(k)) V_i,   Q_i = X W_Q^i, K_i = Z W_K^i, V_i = Z W_V^i
    MultiHead(X, Z) = concat(head_1 .. head_h) W_O
with Z = X for self-attention and Z = the encoder output for cross-attention. Multi-query and grouped-query
attention (Shazeer 2019; Ainslie et al. 2023) are the same class with fewer key/value heads.

B batch, T query length, S key length, H query heads, Hk key/value heads, D head width (k), d width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from tformer.nn.kernels import KERNELS
from tformer.nn.kv_cache import KVCache, StaticKV
from tformer.nn.masks import causal_mask, check_mask


class Attention(nn.Module):
    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        bias: bool = True,
        dropout: float = 0.0,
        kernel: str = "sdpa",
        rotary: nn.Module | None = None,
        alibi: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.q_proj = nn.Linear(d_model, n_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(n_heads * head_dim, d_model, bias=bias)
        self.kernel: Callable = KERNELS[kernel]
        self.dropout = dropout
        self.rotary = rotary  # shared, parameter-free modules; not owned state
        self.alibi = alibi
        self.record_weights = False  # when True, run the eager kernel and keep `weights` (for plots)
        self.weights: Tensor | None = None

    def _heads(self, x: Tensor, n: int) -> Tensor:  # (B, T, n*D) -> (B, n, T, D)
        return x.view(x.shape[0], x.shape[1], n, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        positions: Tensor | None = None,
        cache: KVCache | StaticKV | None = None,
    ) -> Tensor:
        """x (B, T, d) queries; context (B, S, d) keys/values for cross-attention (None: self);
        mask bool (B|1, 1|H, T|1, S) True = attend, combined with `causal` (queries = the last T keys);
        positions (B, T) for RoPE; cache grows (self) or is filled once (cross). Returns (B, T, d)."""
        b, t, _ = x.shape
        q = self._heads(self.q_proj(x), self.n_heads)  # (B, H, T, D)
        if isinstance(cache, StaticKV) and cache.k is not None:
            k, v = cache.k, cache.v  # (B, Hk, S, D), computed at the first step
        else:
            z = x if context is None else context
            k = self._heads(self.k_proj(z), self.n_kv_heads)  # (B, Hk, S, D)
            v = self._heads(self.v_proj(z), self.n_kv_heads)
            if self.rotary is not None:
                q, k = self.rotary(q, positions), self.rotary(k, positions)
            if isinstance(cache, KVCache):
                k, v = cache.update(k, v)  # (B, Hk, S_so_far, D)
            elif isinstance(cache, StaticKV):
                cache.k, cache.v = k, v
        s = k.shape[2]
        bias = None
        if self.alibi is not None:
            idx = torch.arange(s, device=x.device)
            bias = self.alibi(idx[s - t :], idx)  # (1, H, T, S); queries are the last T positions
        if mask is not None:
            check_mask(mask, b, t, s)
        if causal and (mask is not None or bias is not None or t != s):
            keep = causal_mask(t, s, device=x.device)[None, None]  # (1, 1, T, S)
            mask, causal = (keep if mask is None else mask & keep), False
        dead = None
        if mask is not None:
            dead = ~mask.any(dim=-1, keepdim=True)  # (B, 1|H, T, 1): a query that may see no key
            mask = mask | dead  # let those rows attend anywhere, then zero them below: no NaN
        kernel = KERNELS["eager"] if self.record_weights else self.kernel
        out, weights = kernel(
            q, k, v, mask=mask, causal=causal, scale=self.head_dim**-0.5, bias=bias,
            dropout=self.dropout if self.training else 0.0,
        )  # (B, H, T, D)
        if dead is not None:
            out = out.masked_fill(dead, 0.0)
            weights = None if weights is None else weights.masked_fill(dead, 0.0)
        if self.record_weights:
            self.weights = weights.detach()
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # (B, T, H*D)
        return self.out_proj(out)
