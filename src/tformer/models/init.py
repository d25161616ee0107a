"""Weight initialisation, applied once after a model is built.

xavier: Xavier-uniform on every weight matrix and embedding (the paper's reference code), zero biases.
normal: normal(0, std) on weight matrices and embeddings (GPT-2, BERT), zero biases.
scaled_residual: the projections that write into the residual stream (attention out_proj, feed-forward
fc_out / down_proj) get std / sqrt(2 L) (GPT-2, sec. 2.3). Norms start at weight 1, bias 0.
"""

from __future__ import annotations

import math

from torch import nn

from tformer.config import InitConfig

RESIDUAL_WRITERS = ("out_proj", "fc_out", "down_proj")


def init_weights(model: nn.Module, config: InitConfig, *, n_layers: int) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            if config.kind == "xavier":
                nn.init.xavier_uniform_(module.weight)
            else:
                std = config.std
                if config.scaled_residual and name.rsplit(".", 1)[-1] in RESIDUAL_WRITERS:
                    std = std / math.sqrt(2 * n_layers)
                nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm | nn.RMSNorm):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
