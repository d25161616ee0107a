"""Normalisation layers: LayerNorm (biased variance, as the notes define it) and RMSNorm (Zhang & Sennrich
2019, https://arxiv.org/abs/1910.07467)."""

from __future__ import annotations

from torch import nn

from tformer.config import NormConfig


def build_norm(config: NormConfig, d_model: int, *, bias: bool = True) -> nn.Module:
    if config.kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=config.eps)
    return nn.LayerNorm(d_model, eps=config.eps, bias=bias)
