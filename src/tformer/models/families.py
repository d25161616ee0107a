"""The model class of each family, built from its config as it is: nothing checked, nothing placed.
`presets.build_model` (what everything calls) checks the size first; `calc` builds here on the meta device
to count what a config describes."""

from __future__ import annotations

from torch import nn

from tformer.config import ModelConfig, family_of
from tformer.models.bert import BertForPretraining
from tformer.models.gpt import GPT
from tformer.models.rnn import RNNEncoderDecoder
from tformer.models.seq2seq import EncoderDecoder

CLASSES: dict[str, type[nn.Module]] = {"seq2seq": EncoderDecoder, "bert": BertForPretraining, "gpt": GPT,
                                       "rnn": RNNEncoderDecoder}


def model_of(config: ModelConfig) -> nn.Module:
    """The model `config` describes: EncoderDecoder, BertForPretraining, GPT or RNNEncoderDecoder."""
    return CLASSES[family_of(config)](config)


__all__ = ["CLASSES", "model_of"]
