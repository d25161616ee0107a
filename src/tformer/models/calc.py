"""Calculators: parameter count and training FLOPs per token, for any config, without allocating weights
(the model is built on the meta device).

FLOPs follow the usual convention (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, appendix B): a matmul
of an (in -> out) linear layer costs 2 * in * out per token forward; attention adds 2 * 2 * n * h * k per
token per attention layer (Q K^T and the weighted sum of V over n keys); training costs 3 x forward
(backward is twice the forward). Embedding lookups are free; the output projection is not. An RNN's weight
matrices (torch's LSTM and GRU: every gate's input and recurrent weights, each direction and layer) cost 2
per weight per token, as a linear layer's, and an RNN decoder's attention 2 * 2 * n * d per step.
"""

from __future__ import annotations

import torch
from torch import nn

from tformer.config import ModelConfig
from tformer.data.device import check_room
from tformer.models.families import model_of
from tformer.nn.alignment import Alignment
from tformer.nn.attention import Attention


def _meta_model(config: ModelConfig) -> nn.Module:
    with torch.device("meta"):
        return model_of(config)


def param_count(config: ModelConfig, *, exclude_embeddings: bool = False) -> int:
    """Trainable parameters, each tied tensor counted once."""
    model = _meta_model(config)
    skip = set()
    if exclude_embeddings:
        skip = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        skip |= {id(p) for n, p in model.named_parameters() if n.endswith("positions.weight")}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


SIZE_KEYS = ("vocab_size", "src_vocab_size", "d_model", "d_ff", "n_layers", "n_decoder_layers", "max_len")


def weight_bytes(config: ModelConfig) -> int:
    """The bytes of the model `config` describes: its parameters and buffers (each tied tensor once), in the
    types they are built in (the default float type), counted on the meta device without allocating them."""
    model = _meta_model(config)
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def check_fits(config: ModelConfig, *, device: torch.device | str | None = None) -> None:
    """A UserError, before anything is allocated, when the model `config` describes needs more memory for its
    weights than `device` (default: where tensors are made now, the CPU unless set otherwise) has free:
    `the model needs 152.6 GiB for its weights (vocab_size=..., d_ff=40000000, ...), more than the 22.1 GiB
    this machine has free`, naming the config's size keys (`data.device.check_room`)."""
    device = torch.empty(0).device if device is None else torch.device(device)
    if device.type == "meta":
        return
    keys = ", ".join(f"{k}={getattr(config, k)}" for k in SIZE_KEYS if getattr(config, k, None) is not None)
    check_room(weight_bytes(config), device, what=f"the model needs {{size}} for its weights ({keys})")


def forward_flops_per_token(config: ModelConfig, seq_len: int) -> int:
    """Forward FLOPs per token at context `seq_len` (source and target both `seq_len` for encoder-decoder)."""
    return model_forward_flops(_meta_model(config), seq_len)


def train_flops_per_token(config: ModelConfig, seq_len: int) -> int:
    return 3 * forward_flops_per_token(config, seq_len)


def model_forward_flops(model: nn.Module, seq_len: int) -> int:
    """Forward FLOPs per token of a built model (any head: a classifier's too) at context `seq_len`: 2 per
    weight of every linear layer and RNN, and 4 * seq_len * h * k per attention layer (4 * seq_len * d for an
    RNN decoder's). An encoder-decoder's figure is per pair of a source and a target token (both sides at
    `seq_len`)."""
    flops = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            flops += 2 * module.in_features * module.out_features
        elif isinstance(module, nn.RNNBase):
            flops += 2 * sum(p.numel() for name, p in module.named_parameters() if name.startswith("weight_"))
        elif isinstance(module, Attention):
            flops += 4 * seq_len * module.n_heads * module.head_dim
        elif isinstance(module, Alignment):
            flops += 4 * seq_len * module.d_model
    return flops


def model_summary(model: nn.Module, *, seq_len: int) -> str:
    """One line for the start of a training: the parameters (each tied tensor once; and without the
    embeddings, the N of the 6N rule) and the training FLOPs per token (3 x forward) at context `seq_len`,
    e.g. `model: 1.23M parameters (0.98M without embeddings), 9.1M training FLOPs per token at context 128`."""
    params = {id(p): p for p in model.parameters()}
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    embedded |= {id(p) for name, p in model.named_parameters() if name.endswith("positions.weight")}
    total = sum(p.numel() for p in params.values())
    body = sum(p.numel() for key, p in params.items() if key not in embedded)
    flops = 3 * model_forward_flops(model, seq_len)
    return (f"model: {_si(total)} parameters ({_si(body)} without embeddings), {_si(flops)} training FLOPs per "
            f"token at context {seq_len}")


def _si(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(int(n))


__all__ = ["SIZE_KEYS", "check_fits", "forward_flops_per_token", "model_forward_flops", "model_summary",
           "param_count", "train_flops_per_token", "weight_bytes"]
