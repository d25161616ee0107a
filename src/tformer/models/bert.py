"""Encoder-only BERT (Devlin et al. 2019, https://arxiv.org/abs/1810.04805).

`Bert` is the encoder: token + position + segment embeddings, LayerNorm, post-LN layers, and a pooler
(tanh of a linear map of the [CLS] vector). Heads compose around it:
  - `BertForPretraining`: masked-LM head (transform, norm, output tied to the token embeddings, bias)
    and next-sentence head on the pooled vector.
  - `BertClassifier`: dropout and a linear layer on the pooled vector.

B batch, T length, d width, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tformer.config import BertConfig
from tformer.models.builders import build_embeddings, build_norm, build_stack
from tformer.models.init import init_weights
from tformer.models.stacks import positions_for
from tformer.nn.masks import attention_mask
from tformer.nn.mlp import ACTIVATION_FNS


class Bert(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = build_embeddings(config, nn.Embedding(config.vocab_size, d),
                                      segments=nn.Embedding(config.type_vocab_size, d),
                                      norm=build_norm(config.norm, d))
        self.encoder = build_stack(config, n_layers=config.n_layers, causal=False)
        self.pooler = nn.Linear(d, d)

    def forward(self, ids: Tensor, *, segments: Tensor | None = None,
                valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """ids, segments (B, T); valid (B, T) True at real tokens (default: ids != pad); positions count
        from each row's first real token. Returns hidden states (B, T, d) and the pooled vector (B, d) of
        column 0, the [CLS] token when the batch is right-padded (BERT's convention)."""
        if valid is None:
            valid = ids != self.config.pad_id
        positions = positions_for(ids, valid=valid)  # (B, T), from each row's first real token
        x = self.embed(ids, positions, segments)  # (B, T, d)
        h = self.encoder(x, mask=attention_mask(ids.shape[1], valid), positions=positions)
        return h, torch.tanh(self.pooler(h[:, 0]))


class MaskedLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = nn.Linear(config.d_model, config.d_model)
        self.act = ACTIVATION_FNS[config.activation]
        self.norm = build_norm(config.norm, config.d_model)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, h: Tensor) -> Tensor:  # (B, T, d) -> (B, T, V)
        return self.decoder(self.norm(self.act(self.transform(h))))


class BertForPretraining(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.mlm_head = MaskedLMHead(config)
        self.nsp_head = nn.Linear(config.d_model, 2)
        init_weights(self, config.init, n_layers=config.n_layers)
        self.mlm_head.decoder.weight = self.bert.embed.tokens.weight  # tied, as in BERT

    def forward(self, ids: Tensor, *, segments: Tensor | None = None,
                valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """-> masked-LM logits (B, T, V) and next-sentence logits (B, 2) (index 0: B follows A)."""
        h, pooled = self.bert(ids, segments=segments, valid=valid)
        return self.mlm_head(h), self.nsp_head(pooled)


class BertClassifier(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.n_labels)
        init_weights(self, config.init, n_layers=config.n_layers)

    def forward(self, ids: Tensor, *, segments: Tensor | None = None, valid: Tensor | None = None) -> Tensor:
        """-> class logits (B, n_labels)."""
        _, pooled = self.bert(ids, segments=segments, valid=valid)
        return self.classifier(self.dropout(pooled))
