"""Position-wise feed-forward networks: the paper's two linear maps with a non-linearity between,
FFN(x) = max(0, x W1 + b1) W2 + b2, and the gated variants (GLU, Shazeer 2020,
https://arxiv.org/abs/2002.05202) used by Llama: down(act(gate(x)) * up(x)).

B batch, T length, d width, m feed-forward width."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATION_FNS = {
    "relu": F.relu,
    "relu2": lambda x: F.relu(x).square(),  # ReLU squared (So et al. 2021, Primer; modded-nanogpt)
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "swiglu": F.silu,
    "geglu": F.gelu,
}
GATED = ("swiglu", "geglu")  # the activations that take GatedFeedForward


class FeedForward(nn.Module):
    def __init__(self, *, d_model: int, d_ff: int, activation: str, bias: bool, dropout: float) -> None:
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff, bias=bias)
        self.fc_out = nn.Linear(d_ff, d_model, bias=bias)
        self.act = ACTIVATION_FNS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, T, d) -> (B, T, d)
        return self.fc_out(self.dropout(self.act(self.fc_in(x))))  # (B, T, m) inside


class GatedFeedForward(nn.Module):
    def __init__(self, *, d_model: int, d_ff: int, activation: str, bias: bool, dropout: float) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.act = ACTIVATION_FNS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, T, d) -> (B, T, d)
        return self.down_proj(self.dropout(self.act(self.gate_proj(x)) * self.up_proj(x)))
