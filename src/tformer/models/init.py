"""Weight initialisation, applied once after a model is built.

xavier: Xavier-uniform on every weight matrix, zero biases, and embeddings normal(0, d^-1/2) as in the
        paper's reference code (tensor2tensor): multiplied by sqrt(d) they enter the model at unit scale,
        as large as the sinusoids they are added to. (Xavier-uniform embeddings, 4 x smaller at vocabulary
        8,000 and d = 256, drown the token identity in the positions; a translator trained so ignored its
        source for the first thousand steps.)
normal: normal(0, std) on weight matrices and embeddings (GPT-2, BERT), zero biases.
scaled_residual: the projections that write into the residual stream (attention out_proj, feed-forward
fc_out / down_proj) get std / sqrt(2 L) (GPT-2, sec. 2.3). Norms start at weight 1, bias 0.
zero_residual: those projections start at zero instead, whatever the kind (modded-nanogpt; Fixup and
ReZero before it): with pre-LN every block starts as the identity and the stack as embeddings -> output.
"""

from __future__ import annotations

import math

from torch import nn

from tformer.config import InitConfig

RESIDUAL_WRITERS = ("out_proj", "fc_out", "down_proj")


def init_weights(model: nn.Module, config: InitConfig, *, n_layers: int) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            writes_residual = name.rsplit(".", 1)[-1] in RESIDUAL_WRITERS
            if config.zero_residual and writes_residual:
                nn.init.zeros_(module.weight)
            elif config.kind == "xavier" and isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=module.embedding_dim**-0.5)
            elif config.kind == "xavier":
                nn.init.xavier_uniform_(module.weight)
            else:
                std = config.std
                if config.scaled_residual and writes_residual:
                    std = std / math.sqrt(2 * n_layers)
                nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm | nn.RMSNorm):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
