"""Low-rank attention (Linformer, Wang et al. 2020, https://arxiv.org/abs/2006.04768).

The n x n attention matrix is close to low rank (sec. 3), so project the keys and values along the
sequence to a fixed length k before attending (eq. 7):

    head = softmax(Q (E K)^T / sqrt(d_k)) (F V),    E, F learned (k x n)

Every query then scores k rows instead of n: O(n k d) time and memory. E and F are shared by the heads of a
layer (the paper's "headwise sharing"), learned per layer, and cut to the first S columns for a shorter
input. Mixing positions this way lets every row see the whole sequence, so the kind is bidirectional only.
Padded keys and values are zeroed before the projection, so their contents never reach the output (a
projected row made only of padding is a zero key that still takes its share of the softmax).

B batch, H heads, Hk key/value heads, T query length, S length, R projected length (the paper's k), D head width.
"""

from __future__ import annotations

from torch import Tensor, nn

from tformer.errors import UserError
from tformer.nn.kernels.base import Kernel, key_valid
from tformer.nn.kernels.sdpa import sdpa_attention


class LowRankAttention(Kernel):
    causal_ok = False

    def __init__(self, *, rank: int, max_len: int) -> None:
        super().__init__()
        self.proj_k = nn.Linear(max_len, rank, bias=False)  # E; weight (R, n)
        self.proj_v = nn.Linear(max_len, rank, bias=False)  # F

    def new_cache(self, **_: object) -> None:
        raise ValueError("low-rank (Linformer) attention is bidirectional and has no decoding cache")

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool, scale: float,
               bias: Tensor | None, dropout: float) -> tuple[Tensor, None]:
        if causal:
            raise ValueError("low-rank (Linformer) attention mixes all positions and cannot be causal")
        if bias is not None:
            raise UserError("low-rank attention takes no score bias (ALiBi needs exact attention)")
        s = k.shape[2]
        if s > self.proj_k.in_features:
            raise UserError(f"sequence length {s} is longer than the low-rank projection's "
                             f"max_len={self.proj_k.in_features}")
        valid = key_valid(mask, k.shape[0], s, kind="lowrank")
        if valid is not None:
            keep = valid[:, None, :, None].to(k.dtype)  # (B, 1, S, 1)
            k, v = k * keep, v * keep
        k = self.proj_k.weight[:, :s] @ k  # (R, S) @ (B, Hk, S, D) -> (B, Hk, R, D)
        v = self.proj_v.weight[:, :s] @ v
        return sdpa_attention(q, k, v, scale=scale, dropout=dropout)
