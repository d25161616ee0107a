"""Multi-head attention as the notes write it (Vaswani et al. 2017, sec. 3.2):
    head_i = softmax(Q_i K_i^T / sqrt(k)) V_i,   Q_i = X W_Q^i, K_i = Z W_K^i, V_i = Z W_V^i
    MultiHead(X, Z) = concat(head_1 .. head_h) W_O
with Z = X for self-attention and Z = the encoder output for cross-attention. Multi-query and grouped-query
attention (Shazeer 2019; Ainslie et al. 2023) are the same class with fewer key/value heads.

B batch, T query length, S key length, H query heads, Hk key/value heads, D head width (k), d width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.errors import UserError
from tformer.nn.kernels.base import Kernel
from tformer.nn.kernels.exact import ExactAttention
from tformer.nn.kv_cache import MixerState, StaticKV
from tformer.nn.masks import check_mask

_REFERENCE = ExactAttention(fused=False)  # for recorded weights; not a submodule


class Attention(nn.Module):
    """The projections, heads and positions around a kernel (`tformer.nn.kernels`), which computes the
    attention itself: exact by default, or one of the cheaper kinds. A kernel with `shared_qk` (Reformer's
    LSH) uses the normalised queries as keys, and the layer then has no `k_proj`."""

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        bias: bool = True,
        dropout: float = 0.0,
        kernel: Kernel | None = None,
        rotary: nn.Module | None = None,
        alibi: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.kernel = kernel if kernel is not None else ExactAttention(fused=True)
        if self.kernel.shared_qk and n_kv_heads != n_heads:
            raise UserError(f"shared query/key attention needs n_kv_heads={n_kv_heads} equal to n_heads={n_heads}")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.q_proj = nn.Linear(d_model, n_heads * head_dim, bias=bias)
        self.k_proj = None if self.kernel.shared_qk else nn.Linear(d_model, n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(n_heads * head_dim, d_model, bias=bias)
        self.dropout = dropout
        self.rotary = rotary  # parameter-free tables, one per stack, shared by its layers (build_stack)
        self.alibi = alibi
        self.record_weights = False  # when True, run the eager kernel and keep `weights` (for plots)
        self.weights: Tensor | None = None

    def _heads(self, x: Tensor, n: int) -> Tensor:  # (B, T, n*D) -> (B, n, T, D)
        return x.view(x.shape[0], x.shape[1], n, self.head_dim).transpose(1, 2)

    def new_cache(self, *, batch: int, max_len: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> MixerState:
        """The kernel's decoding state for this layer's self-attention (a KVCache unless the kind keeps less)."""
        return self.kernel.new_cache(batch=batch, n_kv_heads=self.n_kv_heads, max_len=max_len,
                                     head_dim=self.head_dim, dtype=dtype, device=device)

    def _keys_values(self, x: Tensor, q: Tensor, context: Tensor | None,
                     positions: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        z = x if context is None else context
        v = self._heads(self.v_proj(z), self.n_kv_heads)  # (B, Hk, S, D)
        if self.rotary is not None:
            q = self.rotary(q, positions)
        if self.k_proj is None:
            return q, F.normalize(q, dim=-1), v  # shared QK: keys are the unit-length queries
        k = self._heads(self.k_proj(z), self.n_kv_heads)  # (B, Hk, S, D)
        if self.rotary is not None:
            k = self.rotary(k, positions)
        return q, k, v

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        positions: Tensor | None = None,
        cache: MixerState | StaticKV | None = None,
    ) -> Tensor:
        """x (B, T, d) queries; context (B, S, d) keys/values for cross-attention (None: self);
        mask bool (B|1, 1|H, T|1, S) True = attend, combined with `causal` (queries = the last T keys);
        positions (B, T) for RoPE; cache: the kernel's state, grown here (self) or a StaticKV filled once
        (cross). Returns (B, T, d)."""
        b, t, _ = x.shape
        q = self._heads(self.q_proj(x), self.n_heads)  # (B, H, T, D)
        kernel = self.kernel
        if self.record_weights:
            if not kernel.exact:
                raise UserError(f"attention weights can be recorded only for exact attention, not {kernel}")
            kernel = _REFERENCE
        if isinstance(cache, StaticKV):
            if cache.k is None:
                cache.k, cache.v = self._keys_values(x, q, context, positions)[1:]
            k, v, cache = cache.k, cache.v, None  # (B, Hk, S, D), computed at the first step
        else:
            q, k, v = self._keys_values(x, q, context, positions)
        s = k.shape[2] + (cache.length if cache is not None else 0)
        bias = None
        if self.alibi is not None:
            idx = torch.arange(s, device=x.device)
            bias = self.alibi(idx[s - t :], idx)  # (1, H, T, S); queries are the last T positions
        if mask is not None:
            check_mask(mask, b, t, s)
        out, weights = kernel(
            q, k, v, mask=mask, causal=causal, scale=self.head_dim**-0.5, bias=bias,
            dropout=self.dropout if self.training else 0.0, cache=cache,
        )  # (B, H, T, D)
        if self.record_weights:
            self.weights = weights.detach()
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # (B, T, H*D)
        return self.out_proj(out)
