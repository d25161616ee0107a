"""Position information.

Added to the token embeddings:
  - sinusoidal (Vaswani et al. 2017, sec. 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(.)
  - learned: one trained vector per position.
Inside attention:
  - RoPE (Su et al. 2021, https://arxiv.org/abs/2104.09864) rotates each query/key pair of dimensions by an
    angle proportional to the position, so scores depend on relative offsets only.
  - ALiBi (Press et al. 2022, https://arxiv.org/abs/2108.12409) adds -slope_h * distance to the scores.

B batch, T length, H heads, D head width, d model width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tformer.errors import UserError


def sinusoid_table(n: int, d: int, *, layout: str = "interleaved") -> Tensor:
    """(n, d) table. "interleaved" is the paper's (sin on even dims, cos on odd); "split" puts all sines in
    the first half and all cosines in the second (Marian / fairseq)."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]  # (n, 1)
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (ceil(d/2),)
    angle = pos * freq  # (n, ceil(d/2))
    table = torch.zeros(n, d, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle[:, : d // 2])
    else:
        half = (d + 1) // 2
        table[:, :half] = torch.sin(angle)
        table[:, half:] = torch.cos(angle[:, : d - half])
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoids, looked up by position; kept as a non-persistent buffer (not in the state dict)."""

    def __init__(self, *, max_len: int, d_model: int, layout: str = "interleaved") -> None:
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoid_table(max_len, d_model, layout=layout), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:  # (B|1, T) -> (B|1, T, d)
        return self.table[positions]


class LearnedPositions(nn.Module):
    def __init__(self, *, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, positions: Tensor) -> Tensor:  # (B|1, T) -> (B|1, T, d)
        return self.weight[positions]


class Rotary(nn.Module):
    """RoPE in the "rotate half" layout: dimension i is paired with i + D/2 (as Hugging Face Llama)."""

    def __init__(self, *, max_len: int, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise UserError(f"head_dim={head_dim} must be even for RoPE")
        self.max_len = max_len
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
        angle = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq  # (n, D/2)
        angle = torch.cat([angle, angle], dim=-1)  # (n, D)
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, T, D), positions (B|1, T)
        cos = self.cos[positions][:, None]  # (B|1, 1, T, D)
        sin = self.sin[positions][:, None]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


def alibi_slopes(n_heads: int) -> Tensor:
    """The geometric slopes 2^(-8 h / H) of the ALiBi paper, extended as it describes for H not a power
    of two."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
    extra = [2 ** (-4 * (2 * i + 1) / closest) for i in range(n_heads - closest)]
    return torch.tensor(base + extra)


class ALiBi(nn.Module):
    """Score bias -slope_h * |i - j| (causal stacks only ever see j <= i, so this is the paper's form)."""

    def __init__(self, *, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, q_index: Tensor, k_index: Tensor) -> Tensor:  # (T,), (S,) -> (1, H, T, S)
        distance = (q_index[:, None] - k_index[None, :]).abs().float()  # (T, S)
        return -self.slopes[None, :, None, None] * distance
