"""The paper's encoder-decoder (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, fig. 1).

    memory = encode(src)                      embeddings * sqrt(d) + positions -> L encoder layers
    logits = decode(tgt, memory)              masked self-attn, cross-attn over memory, FFN -> linear
    p(y_t | y_<t, x) = softmax(logits_t)

`encode` and `decode` are separate so that decoding runs the encoder once per sentence.

B batch, S source length, T target length, d width, V target vocabulary.
"""

from __future__ import annotations

from torch import Tensor, nn

from tformer.config import Seq2SeqConfig
from tformer.models.builders import build_embeddings, build_stack
from tformer.models.init import init_weights
from tformer.models.stacks import positions_for
from tformer.nn.kv_cache import LayerCache
from tformer.nn.masks import attention_mask


class EncoderDecoder(nn.Module):
    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        tgt_tokens = nn.Embedding(config.vocab_size, d)
        src_tokens = tgt_tokens if config.shared_vocab else nn.Embedding(config.src_vocab_size, d)
        self.src_embed = build_embeddings(config, src_tokens)
        self.tgt_embed = build_embeddings(config, tgt_tokens)
        self.encoder = build_stack(config, n_layers=config.n_layers, causal=False)
        self.decoder = build_stack(config, n_layers=config.n_decoder_layers, causal=True, cross=True)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=config.output_bias)
        init_weights(self, config.init, n_layers=config.n_layers + config.n_decoder_layers)
        if config.tie_embeddings:
            self.lm_head.weight = tgt_tokens.weight

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> Tensor:
        """src (B, S) ids; src_valid (B, S) True at real tokens (default: ids != pad). -> (B, S, d)."""
        if src_valid is None:
            src_valid = src != self.config.pad_id
        positions = positions_for(src, valid=src_valid)  # (B, S); RoPE needs them inside attention too
        x = self.src_embed(src, positions)  # (B, S, d)
        return self.encoder(x, mask=attention_mask(src.shape[1], src_valid), positions=positions)

    def decode(self, tgt: Tensor, memory: Tensor, src_valid: Tensor, *, tgt_valid: Tensor | None = None,
               caches: list[LayerCache] | None = None, offset: int = 0) -> Tensor:
        """tgt (B, T) decoder inputs (shifted right: start symbol first); memory (B, S, d); src_valid (B, S);
        tgt_valid (B, T_total) True at real target tokens so far (None: no target padding; else positions
        count from each row's first real token); with `caches`, tgt holds only the new positions offset..
        and earlier keys/values come from the cache.
        Returns logits (B, T, V)."""
        positions = positions_for(tgt, offset, valid=tgt_valid)  # (B|1, T), from each row's first real token
        x = self.tgt_embed(tgt, positions)  # (B, T, d)
        mask = None if tgt_valid is None else tgt_valid[:, None, None, :]  # (B, 1, 1, T_total)
        memory_mask = src_valid[:, None, None, :]  # (B, 1, 1, S)
        h = self.decoder(x, memory, mask=mask, memory_mask=memory_mask, positions=positions, caches=caches)
        return self.lm_head(h)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt (B, T) decoder inputs, both padded with pad_id -> (B, T, V)."""
        src_valid = src != self.config.pad_id
        memory = self.encode(src, src_valid)
        return self.decode(tgt, memory, src_valid)

    def new_caches(self, batch: int, max_len: int) -> list[LayerCache]:
        p = next(self.parameters())  # not lm_head's: an int8 one (tformer.quant) has no weight tensor
        return self.decoder.new_caches(batch=batch, max_len=max_len, dtype=p.dtype, device=p.device)
