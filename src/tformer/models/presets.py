"""Presets are data: a family and the values that differ from its defaults. `preset(name)` builds the
config (overrides allowed, as nested dicts); `build_model(config)` builds the model for any config.

The paper's sizes (Vaswani et al. 2017, table 3): base d=512, m=2048, h=8, L=6, dropout 0.1;
big d=1024, m=4096, h=16, dropout 0.3; both with a shared 37,000-token vocabulary and tied embeddings.
"""

from __future__ import annotations

import copy

from torch import nn

from tformer.config import FAMILIES, ModelConfig, from_dict
from tformer.errors import UserError
from tformer.models.calc import check_fits
from tformer.models.families import model_of

PRESETS: dict[str, tuple[str, dict]] = {
    "transformer-base": ("seq2seq", dict(vocab_size=37000, d_model=512, d_ff=2048, n_heads=8, n_layers=6)),
    "transformer-big": ("seq2seq", dict(
        vocab_size=37000, d_model=1024, d_ff=4096, n_heads=16, n_layers=6,
        dropout=dict(embed=0.3, residual=0.3))),
    "transformer-tiny": ("seq2seq", dict(vocab_size=1000, d_model=64, d_ff=256, n_heads=4, n_layers=2,
                                         max_len=256)),
    "bert-base": ("bert", dict(
        vocab_size=30522, d_model=768, d_ff=3072, n_heads=12, n_layers=12, max_len=512,
        dropout=dict(embed=0.1, attention=0.1, residual=0.1))),
    "bert-tiny": ("bert", dict(vocab_size=1000, d_model=64, d_ff=256, n_heads=4, n_layers=2, max_len=128)),
    "gpt2-small": ("gpt", dict(
        vocab_size=50257, d_model=768, d_ff=3072, n_heads=12, n_layers=12, max_len=1024,
        dropout=dict(embed=0.1, attention=0.1, residual=0.1))),
    "gpt-tiny": ("gpt", dict(vocab_size=1000, d_model=64, d_ff=256, n_heads=4, n_layers=2, max_len=256)),
    "llama-tiny": ("gpt", dict(
        vocab_size=1000, d_model=64, d_ff=172, n_heads=4, n_kv_heads=2, n_layers=2, max_len=256,
        activation="swiglu", bias=False, tie_embeddings=False,
        positions=dict(kind="rope"), norm=dict(kind="rmsnorm", eps=1e-6, placement="pre"),
        dropout=dict(embed=0.0, residual=0.0))),
    # The road to the Transformer (docs/models.md): each about as large as the demo's Transformer
    "rnn-small": ("rnn", dict(vocab_size=1000, d_model=256, n_layers=2, cell="lstm", bidirectional=True)),
    "rnn-attention-small": ("rnn", dict(vocab_size=1000, d_model=232, n_layers=2, cell="lstm", bidirectional=True,
                                        match="general")),
}


def preset(name: str, overrides: dict | None = None) -> ModelConfig:
    """The config of preset `name`, with `overrides` (nested dicts) merged over it."""
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    family, values = PRESETS[name]
    merged = merge(copy.deepcopy(values), overrides or {})
    return from_dict(FAMILIES[family], merged)


def merge(base: dict, extra: dict) -> dict:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def build_model(config: ModelConfig) -> nn.Module:
    """The model class for the config's family: EncoderDecoder, BertForPretraining, GPT or RNNEncoderDecoder.
    A model larger than the memory free where it is built is refused first (`calc.check_fits`): the one
    builder of training, of every checkpoint's loader and of the Python API."""
    check_fits(config)
    return model_of(config)
