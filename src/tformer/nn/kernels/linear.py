"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs", https://arxiv.org/abs/2006.16236).

Softmax attention weighs value j by exp(q_i . k_j). Replace that similarity by phi(q_i) . phi(k_j) with the
feature map phi(x) = elu(x) + 1 (positive, so the weights stay positive) and the sum reorders (eq. 4-5):

    out_i = phi(q_i)^T [sum_j phi(k_j) v_j^T] / (phi(q_i)^T [sum_j phi(k_j)])

The bracketed sums are computed once, so the cost is O(n d^2) instead of O(n^2 d). Causal (eq. 8-10): the
sums run over j <= i, a D x D state S_i = S_{i-1} + phi(k_i) v_i^T and a normaliser z_i = z_{i-1} + phi(k_i)
- an RNN whose state does not grow with the sequence; decoding keeps only (S, z). For training the causal
form is computed chunk by chunk: exact masked scores inside a chunk of length c, the carried state for
everything before, so the cost is O(n c d + n d^2) and there is no Python loop over positions.

There are no attention probabilities, so attention dropout does not apply; `scale` is unused (the feature
map has no temperature). Grouped-query heads share one state per key/value head.

B batch, Hk key/value heads, G query heads per key/value head, T new length, S length, D head width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from tformer.errors import UserError
from tformer.nn.kernels.base import Kernel, key_valid

EPS = 1e-6  # keeps a query with no visible key at 0 / EPS = 0


def feature_map(x: Tensor) -> Tensor:
    return F.elu(x) + 1.0


class LinearState:
    """The causal form's decoding state per key/value head: S (B, Hk, D, D), z (B, Hk, D)."""

    def __init__(self, *, batch: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        self.s = torch.zeros(batch, n_kv_heads, head_dim, head_dim, dtype=dtype, device=device)
        self.z = torch.zeros(batch, n_kv_heads, head_dim, dtype=dtype, device=device)
        self.length = 0

    def reorder(self, index: Tensor) -> None:
        self.s, self.z = self.s.index_select(0, index), self.z.index_select(0, index)


def _grouped(q: Tensor, n_kv_heads: int) -> Tensor:  # (B, H, T, D) -> (B, Hk, G, T, D)
    b, h, t, d = q.shape
    return q.view(b, n_kv_heads, h // n_kv_heads, t, d)


def linear_bidirectional(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """phi(q), phi(k) with padded keys already zeroed: q (B, H, T, D), k, v (B, Hk, S, D) -> (B, H, T, D)."""
    qg = _grouped(q, k.shape[1])  # (B, Hk, G, T, D)
    s = (k.transpose(-2, -1) @ v)[:, :, None]  # (B, Hk, 1, D, D)
    z = k.sum(dim=2)[:, :, None, :, None]  # (B, Hk, 1, D, 1)
    out = (qg @ s) / ((qg @ z) + EPS)  # (B, Hk, G, T, D)
    return out.flatten(1, 2)


def linear_causal(q: Tensor, k: Tensor, v: Tensor, *, chunk: int, state: LinearState | None = None
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """Causal form by chunks. phi(q) (B, H, T, D), phi(k), v (B, Hk, T, D) -> (out (B, H, T, D), S, z),
    starting from `state` (or zeros) and returning the state after the last position."""
    b, hk, t, d = k.shape
    qg = _grouped(q, hk)  # (B, Hk, G, T, D)
    s = k.new_zeros(b, hk, d, v.shape[-1]) if state is None else state.s  # (B, Hk, D, D)
    z = k.new_zeros(b, hk, d) if state is None else state.z  # (B, Hk, D)
    outs = []
    for start in range(0, t, chunk):
        qc, kc, vc = qg[:, :, :, start : start + chunk], k[:, :, start : start + chunk], v[:, :, start : start + chunk]
        c = kc.shape[2]
        tri = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()  # (c, c): j <= i
        scores = (qc @ kc[:, :, None].transpose(-2, -1)) * tri  # (B, Hk, G, c, c)
        num = scores @ vc[:, :, None] + qc @ s[:, :, None]  # (B, Hk, G, c, D)
        den = scores.sum(-1, keepdim=True) + qc @ z[:, :, None, :, None]  # (B, Hk, G, c, 1)
        outs.append(num / (den + EPS))
        s = s + kc.transpose(-2, -1) @ vc  # (B, Hk, D, D)
        z = z + kc.sum(dim=2)
    return torch.cat(outs, dim=3).flatten(1, 2), s, z


def linear_recurrent(q: Tensor, k: Tensor, v: Tensor, state: LinearState) -> Tensor:
    """The RNN view, one position at a time (the reference the chunked form is tested against).
    phi(q) (B, H, T, D), phi(k), v (B, Hk, T, D) -> (B, H, T, D); updates `state`."""
    qg = _grouped(q, k.shape[1])
    outs = []
    for i in range(k.shape[2]):
        state.s = state.s + k[:, :, i, :, None] * v[:, :, i, None, :]  # (B, Hk, D, D): + phi(k_i) v_i^T
        state.z = state.z + k[:, :, i]
        qi = qg[:, :, :, i]  # (B, Hk, G, D)
        num = (qi[..., None, :] @ state.s[:, :, None]).squeeze(-2)  # (B, Hk, G, D)
        den = (qi * state.z[:, :, None]).sum(-1, keepdim=True)  # (B, Hk, G, 1)
        outs.append(num / (den + EPS))
    state.length += k.shape[2]
    return torch.stack(outs, dim=3).flatten(1, 2)  # (B, H, T, D)


class LinearAttention(Kernel):
    def __init__(self, *, chunk: int) -> None:
        super().__init__()
        self.chunk = chunk

    def extra_repr(self) -> str:
        return f"chunk={self.chunk}"

    def new_cache(self, *, batch: int, n_kv_heads: int, max_len: int, head_dim: int,
                  dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> LinearState:
        return LinearState(batch=batch, n_kv_heads=n_kv_heads, head_dim=head_dim, dtype=dtype, device=device)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None, causal: bool = False,
                scale: float, bias: Tensor | None = None, dropout: float = 0.0,
                cache: LinearState | None = None) -> tuple[Tensor, None]:
        if bias is not None:
            raise UserError("linear attention takes no score bias (ALiBi needs exact attention)")
        if cache is not None and not causal:
            raise ValueError("linear attention decodes with a cache only when causal")
        t = k.shape[2]
        seen = 0 if cache is None else cache.length
        valid = key_valid(mask, k.shape[0], seen + t, kind="linear")
        fq, fk = feature_map(q), feature_map(k)  # (B, H, T, D), (B, Hk, T, D)
        if valid is not None:
            keep = valid[:, None, -t:, None].to(fk.dtype)  # (B, 1, T, 1): the new keys' padding
            fk, v = fk * keep, v * keep
        if not causal:
            return linear_bidirectional(fq, fk, v), None
        out, s, z = linear_causal(fq, fk, v, chunk=self.chunk, state=cache)
        if cache is not None:
            cache.s, cache.z, cache.length = s, z, cache.length + t
        return out, None
