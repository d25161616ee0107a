"""Calculators: parameter count and training FLOPs per token, for any config, without allocating weights
(the model is built on the meta device).

FLOPs follow the usual convention (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, appendix B): a matmul
of an (in -> out) linear layer costs 2 * in * out per token forward; attention adds 2 * 2 * n * h * k per
token per attention layer (Q K^T and the weighted sum of V over n keys); training costs 3 x forward
(backward is twice the forward). Embedding lookups are free; the output projection is not.
"""

from __future__ import annotations

import torch
from torch import nn

from tformer.config import TransformerConfig
from tformer.models.presets import build_model
from tformer.nn.attention import Attention


def _meta_model(config: TransformerConfig) -> nn.Module:
    with torch.device("meta"):
        return build_model(config)


def param_count(config: TransformerConfig, *, exclude_embeddings: bool = False) -> int:
    """Trainable parameters, each tied tensor counted once."""
    model = _meta_model(config)
    skip = set()
    if exclude_embeddings:
        skip = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        skip |= {id(p) for n, p in model.named_parameters() if n.endswith("positions.weight")}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def forward_flops_per_token(config: TransformerConfig, seq_len: int) -> int:
    """Forward FLOPs per token at context `seq_len` (source and target both `seq_len` for encoder-decoder)."""
    flops = 0
    for module in _meta_model(config).modules():
        if isinstance(module, nn.Linear):
            flops += 2 * module.in_features * module.out_features
        elif isinstance(module, Attention):
            flops += 4 * seq_len * module.n_heads * module.head_dim
    return flops


def train_flops_per_token(config: TransformerConfig, seq_len: int) -> int:
    return 3 * forward_flops_per_token(config, seq_len)
