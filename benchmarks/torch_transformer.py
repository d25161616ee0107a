"""`torch.nn.Transformer` behind tformer's encoder-decoder interface, for benchmarks/train_speed.py's
seq2seq contender (moved here from translate_baseline.py, whose baseline is now Hugging Face Marian).

The same sizes as our `EncoderDecoder` from one `Seq2SeqConfig`: the embeddings, sinusoidal positions and
tied output projection are built as ours are, around `nn.Transformer`'s layers. `nn.Transformer` adds a
final LayerNorm to its encoder and its decoder (2 * 2d parameters more than a post-LN tformer model); it
stays, as users would run it. It has no KV cache: decoding re-runs the whole prefix at every step.

B batch, S source length, T target length, d width, V vocabulary.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn

from tformer.config import Seq2SeqConfig
from tformer.nn.positions import sinusoid_table

TORCH_ACTIVATIONS = ("relu", "gelu")


def check_supported(config: Seq2SeqConfig) -> None:
    """A ValueError naming each part of `config` that `nn.Transformer` cannot express."""
    problems = []
    if config.norm.kind != "layernorm":
        problems.append(f"norm.kind={config.norm.kind!r} (nn.Transformer has LayerNorm only)")
    if config.activation not in TORCH_ACTIVATIONS:
        problems.append(f"activation={config.activation!r} (allowed: {', '.join(TORCH_ACTIVATIONS)})")
    if config.positions.kind != "sinusoidal":
        problems.append(f"positions.kind={config.positions.kind!r} (the baseline adds sinusoids only)")
    if config.n_kv_heads != config.n_heads or config.head_dim * config.n_heads != config.d_model:
        problems.append("n_kv_heads / head_dim other than n_heads / d_model // n_heads")
    if not config.shared_vocab:
        problems.append("src_vocab_size (the baseline shares one vocabulary)")
    if problems:
        raise ValueError("nn.Transformer cannot express " + "; ".join(problems))


class TorchBaseline(nn.Module):
    """`nn.Transformer` behind tformer's encoder-decoder interface (`config`, `encode`, `decode`,
    `new_caches`, forward(src, tgt) -> logits), so that tformer's task, loop and greedy decoding run it.

    Around it, as in `EncoderDecoder`: one token embedding shared by source and target, times sqrt(d),
    plus the same sinusoids, then dropout; an output projection tied to the embedding. Dropout follows the
    config part by part (nn.Transformer's single `dropout` is the residual one; its attention and
    feed-forward dropouts are then set to ours)."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        check_supported(config)
        self.config = config
        d = config.d_model
        self.tokens = nn.Embedding(config.vocab_size, d)
        self.scale = math.sqrt(d) if config.scale_embeddings else 1.0
        table = sinusoid_table(config.max_len, d, layout=config.positions.sinusoid_layout)  # (n, d)
        self.register_buffer("positions", table, persistent=False)
        self.embed_dropout = nn.Dropout(config.dropout.embed)
        with warnings.catch_warnings():  # pre-LN or bias=False: no nested-tensor fast path; say it once, here
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = nn.Transformer(
                d_model=d, nhead=config.n_heads, num_encoder_layers=config.n_layers,
                num_decoder_layers=config.n_decoder_layers, dim_feedforward=config.d_ff,
                dropout=config.dropout.residual, activation=config.activation, layer_norm_eps=config.norm.eps,
                batch_first=True, norm_first=config.norm.placement == "pre", bias=config.bias,
            )
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout.p = config.dropout.activation  # inside the feed-forward
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = config.dropout.attention  # on the attention weights
        self.lm_head = nn.Linear(d, config.vocab_size, bias=config.output_bias)
        for linear in (self.tokens, self.lm_head):  # as tformer's init; nn.Transformer inits its own layers
            if config.init.kind == "xavier":
                nn.init.xavier_uniform_(linear.weight)
            else:
                nn.init.normal_(linear.weight, std=config.init.std)
        if self.lm_head.bias is not None:
            nn.init.zeros_(self.lm_head.bias)
        if config.tie_embeddings:
            self.lm_head.weight = self.tokens.weight

    def embed(self, ids: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, d): tokens * scale + sinusoids, dropout."""
        if ids.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {ids.shape[1]} is longer than the context "
                             f"max_len={self.config.max_len}")
        x = self.tokens(ids) * self.scale + self.positions[: ids.shape[1]]  # (B, T, d)
        return self.embed_dropout(x)

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> Tensor:
        """src (B, S) ids; src_valid (B, S) True at real tokens (default: ids != pad) -> (B, S, d)."""
        if src_valid is None:
            src_valid = src != self.config.pad_id
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=~src_valid)  # torch: True = pad

    def decode(self, tgt: Tensor, memory: Tensor, src_valid: Tensor, *, tgt_valid: Tensor | None = None,
               caches: list | None = None, offset: int = 0) -> Tensor:
        """tgt (B, T) decoder inputs from position 0; memory (B, S, d); src_valid (B, S); tgt_valid (B, T)
        True at real target tokens (None: no target padding) -> logits (B, T, V). No KV cache: `caches`
        must be None and `offset` 0 (what `new_caches` makes greedy and beam search do)."""
        if caches is not None or offset:
            raise ValueError("nn.Transformer has no KV cache; decode the whole prefix (caches=None, offset=0)")
        n = tgt.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt.device).triu(1)  # (T, T) True = not allowed
        h = self.transformer.decoder(
            self.embed(tgt), memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=~src_valid,
            tgt_key_padding_mask=None if tgt_valid is None else ~tgt_valid,
        )  # (B, T, d)
        return self.lm_head(h)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt (B, T) decoder inputs, both padded with pad_id -> (B, T, V)."""
        src_valid = src != self.config.pad_id
        return self.decode(tgt, self.encode(src, src_valid), src_valid)

    def new_caches(self, batch: int, max_len: int) -> None:
        """No cache: tformer's greedy and beam search then feed the whole prefix at every step."""
        return None


def n_parameters(model: nn.Module) -> int:
    """Trainable numbers; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters())
