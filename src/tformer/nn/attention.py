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
from tformer.nn.kv_cache import MixerState, StaticKV, readers_per_source
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

    @staticmethod
    def _by_source(q: Tensor, rows: int) -> Tensor:
        """Queries (B, H, T, D) against keys of `rows` rows: as they are when B == rows; when B is a multiple
        (beam search's cross-attention, each source's keys kept once for its consecutive B / rows beams), each
        source's rows as one row's queries, (rows, H, B / rows * T, D): one product per source, not per beam."""
        g = readers_per_source(q.shape[0], rows, what="queries")
        return q if g == 1 else q.unflatten(0, (rows, g)).transpose(1, 2).flatten(2, 3)

    def new_cache(self, *, batch: int, max_len: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> MixerState:
        """The kernel's decoding state for this layer's self-attention (a KVCache unless the kind keeps less)."""
        return self.kernel.new_cache(batch=batch, n_kv_heads=self.n_kv_heads, max_len=max_len,
                                     head_dim=self.head_dim, dtype=dtype, device=device)

    def _project(self, x: Tensor, z: Tensor, *, stacked: bool) -> tuple[Tensor, Tensor | None, Tensor]:
        """q (B, T, H*D) of x; k (None for shared QK) and v (B, S, Hk*D) of z. `stacked` (self-attention over
        whole sequences): one matmul with the three weights stacked, where all three are plain nn.Linear (not
        int8 after `tformer.quant`), as GPT-2's fused c_attn computes them: one product three times as wide
        runs faster than three, and so does its backward, with the same numbers up to float rounding. The
        parameters stay three, as the state dict names them; their modules are not called (hooks on them do
        not run). Not with a cache: stacking copies the weights, a cost decoding would pay at every token."""
        projs = (self.q_proj, self.k_proj, self.v_proj)
        if stacked and all(type(p) is nn.Linear for p in projs):
            weight = torch.cat([p.weight for p in projs])  # (H*D + 2*Hk*D, d)
            bias = None if self.q_proj.bias is None else torch.cat([p.bias for p in projs])
            q, k, v = F.linear(x, weight, bias).split([p.out_features for p in projs], dim=-1)
            return q, k, v
        return self.q_proj(x), None if self.k_proj is None else self.k_proj(z), self.v_proj(z)

    def _queries_keys_values(self, x: Tensor, context: Tensor | None, positions: Tensor | None, *,
                             stacked: bool) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, T, D) and k, v (B, Hk, S, D), RoPE applied; `stacked`: see `_project`."""
        q, k, v = self._project(x, x if context is None else context, stacked=stacked)
        q = self._heads(q, self.n_heads)  # (B, H, T, D)
        v = self._heads(v, self.n_kv_heads)  # (B, Hk, S, D)
        if self.rotary is not None:
            q = self.rotary(q, positions)
        if k is None:
            return q, F.normalize(q, dim=-1), v  # shared QK: keys are the unit-length queries
        k = self._heads(k, self.n_kv_heads)  # (B, Hk, S, D)
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
        """x (B, T, d) queries; context (B, S, d) keys/values for cross-attention (None: self), or (B / g, S, d)
        with each of its rows read by g consecutive rows of x (beam search's beams; the StaticKV of `cache`
        likewise, and the mask then (B / g, 1, 1, S)); mask bool (B|1, 1|H, T|1, S) True = attend, combined
        with `causal` (queries = the last T keys);
        positions (B|1, T) for RoPE; cache: the kernel's state, grown here (self) or a StaticKV filled once
        (cross). Returns (B, T, d)."""
        b, t, _ = x.shape
        kernel = self.kernel
        if self.record_weights:
            if not kernel.exact:
                raise UserError(f"attention weights can be recorded only for exact attention, not {kernel}")
            kernel = _REFERENCE
        if isinstance(cache, StaticKV) and cache.k is not None:  # cross-attention after the first step
            q, k, v, cache = self._heads(self.q_proj(x), self.n_heads), cache.k, cache.v, None
        else:
            stacked = context is None and cache is None  # self-attention over whole sequences
            q, k, v = self._queries_keys_values(x, context, positions, stacked=stacked)
            if isinstance(cache, StaticKV):  # cross-attention's first step: keys and values kept for the rest
                cache.k, cache.v, cache = k, v, None
        q = self._by_source(q, k.shape[0])  # (B_kv, H, B / B_kv * T, D)
        s = k.shape[2] + (cache.length if cache is not None else 0)
        bias = None
        if self.alibi is not None:
            idx = torch.arange(s, device=x.device)
            bias = self.alibi(idx[s - t :], idx)  # (1, H, T, S); queries are the last T positions
        if mask is not None:
            check_mask(mask, q.shape[0], q.shape[2], s)
        out, weights = kernel(
            q, k, v, mask=mask, causal=causal, scale=self.head_dim**-0.5, bias=bias,
            dropout=self.dropout if self.training else 0.0, cache=cache,
        )  # (B, H, T, D)
        if self.record_weights:
            self.weights = weights.detach().unflatten(2, (-1, t)).transpose(1, 2).flatten(0, 1)  # (B, H, T, S)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # (B, T, H*D), rows in order
        return self.out_proj(out)
