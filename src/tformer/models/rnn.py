"""The road to the Transformer: the RNN encoder-decoder (Sutskever et al. 2014; Cho et al. 2014) and the
attention-based RNN (Bahdanau et al. 2015; Luong et al. 2015), with the interface of `EncoderDecoder`, so
that training, greedy and beam search, scoring and the commands take either.

    memory = encode(src)                  embeddings -> encoder RNN: states h_1..h_S and the final state
    logits = decode(tgt, memory)          embeddings -> decoder RNN from the final state (-> attention,
                                          with or without input feeding: `nn/recurrent.py`) -> linear
    p(y_t | y_<t, x) = softmax(logits_t)

What `encode` returns is one tensor, as search reorders it along the batch: the encoder states and then the
decoder's starting state, each layer's h (and, for an LSTM, c) as one more row, (B, S + L, d) or
(B, S + 2L, d). `decode` splits it again at S, the width of `src_valid`. With caches, the decoder's state
(`RecurrentState`) and the attention's keys over the source (a `StaticKV`, computed at the first step) are
carried from step to step and reordered with the beams, as a Transformer's key/value caches are.

B batch, S source length, T target length, L layers, d width, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from tformer.config import RNNSeq2SeqConfig
from tformer.nn.alignment import AdditiveMatch, Alignment, CosineMatch, DotMatch, GeneralMatch
from tformer.nn.kv_cache import LayerCache, StaticKV
from tformer.nn.recurrent import RecurrentDecoder, RecurrentEncoder, RecurrentState

CELLS: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}
MATCHES: dict[str, Callable[[int], nn.Module]] = {  # d_model -> the MATCH module (`nn/alignment.py`)
    "dot": lambda d: DotMatch(),
    "general": lambda d: GeneralMatch(d_model=d),
    "additive": lambda d: AdditiveMatch(d_model=d),
    "cosine": lambda d: CosineMatch(sharpness=d**0.5),  # scores in [-sqrt(d), sqrt(d)] at the start
}


def build_rnn(config: RNNSeq2SeqConfig, *, input_size: int, bidirectional: bool = False) -> nn.RNNBase:
    """One of torch's RNNs of `n_layers` layers, d wide in all (d / 2 per direction if bidirectional), with
    dropout between layers (torch has none after the last)."""
    directions = 2 if bidirectional else 1
    return CELLS[config.cell](input_size, config.d_model // directions, num_layers=config.n_layers,
                              batch_first=True, bidirectional=bidirectional,
                              dropout=config.dropout if config.n_layers > 1 else 0.0)


def build_decoder(config: RNNSeq2SeqConfig) -> RecurrentDecoder:
    """The decoder RNN, with attention by the config's MATCH function unless it is none, and then input
    feeding unless the config turns it off."""
    d = config.d_model
    if config.match == "none":
        return RecurrentDecoder(rnn=build_rnn(config, input_size=d), dropout=config.dropout)
    alignment = Alignment(match=MATCHES[config.match](d), d_model=d)
    width = 2 * d if config.input_feeding else d  # [y_t ; o_t-1], or y_t alone
    return RecurrentDecoder(rnn=build_rnn(config, input_size=width), alignment=alignment,
                            combine=nn.Linear(2 * d, d, bias=False), input_feeding=config.input_feeding,
                            dropout=config.dropout)


class RNNEncoderDecoder(nn.Module):
    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        tgt_tokens = nn.Embedding(config.vocab_size, d)
        self.src_embed = tgt_tokens if config.shared_vocab else nn.Embedding(config.src_vocab_size, d)
        self.tgt_embed = tgt_tokens
        self.embed_dropout = nn.Dropout(config.dropout)
        self.encoder = RecurrentEncoder(rnn=build_rnn(config, input_size=d, bidirectional=config.bidirectional))
        self.decoder = build_decoder(config)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 0:  # every weight and bias; the cosine MATCH's sharpness, a scalar, keeps its start
                nn.init.uniform_(p, -config.init_range, config.init_range)
        if config.tie_embeddings:
            self.lm_head.weight = tgt_tokens.weight

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> Tensor:
        """src (B, S) right-padded ids; src_valid (B, S) True at real tokens (default: ids != pad).
        Returns the memory (B, S + L, d), or (B, S + 2L, d) for an LSTM (the module docstring)."""
        if src_valid is None:
            src_valid = src != self.config.pad_id
        states, h, c = self.encoder(self.embed_dropout(self.src_embed(src)), src_valid)  # (B, S, d), (L, B, d)
        start = [h] if c is None else [h, c]
        return torch.cat([states, *(x.transpose(0, 1) for x in start)], dim=1)

    def decode(self, tgt: Tensor, memory: Tensor, src_valid: Tensor, *, caches: list[LayerCache] | None = None,
               offset: int = 0) -> Tensor:
        """tgt (B, T) decoder inputs (start symbol first); memory from `encode`; src_valid (B, S). Without
        caches, the decoder runs from its starting state over all of tgt; with them (`new_caches`), tgt holds
        only the positions offset.. and the state carries on from the step before. Returns logits (B, T, V)."""
        states, start = memory[:, : src_valid.shape[1]], memory[:, src_valid.shape[1] :]  # (B, S, d), (B, kL, d)
        cache = None if caches is None else caches[0]
        state = RecurrentState() if cache is None else cache.mixer_state
        if state.length != offset:
            raise ValueError(f"the decoder state has consumed {state.length} positions, but decode was given "
                             f"offset={offset}; a new target needs new caches (new_caches)")
        if offset == 0:
            self._start(state, start)
        keys = values = None
        if self.decoder.alignment is not None:
            cross = StaticKV() if cache is None else cache.cross_kv
            if cross.k is None:
                cross.k, cross.v = self.decoder.alignment.keys(states), states
            keys, values = cross.k, cross.v
        x = self.embed_dropout(self.tgt_embed(tgt))  # (B, T, d)
        h = self.decoder(x, state, keys=keys, values=values, valid=src_valid)  # (B, T, d)
        return self.lm_head(h)

    def _start(self, state: RecurrentState, start: Tensor) -> None:
        """The decoder's first state: the encoder's final h (and c) from the end of the memory (B, kL, d)."""
        layers = self.config.n_layers
        h = start[:, :layers].transpose(0, 1)  # (L, B, d)
        c = start[:, layers:].transpose(0, 1) if self.config.cell == "lstm" else None
        feed = start.new_zeros(start.shape[0], start.shape[2]) if self.decoder.input_feeding else None
        state.start(h, c, feed)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt (B, T) decoder inputs, both padded with pad_id -> (B, T, V)."""
        src_valid = src != self.config.pad_id
        return self.decode(tgt, self.encode(src, src_valid), src_valid)

    def new_caches(self, batch: int, max_len: int) -> list[LayerCache]:
        """One cache for the whole decoder (torch's RNN steps all its layers at once): its recurrent state,
        started at the first step, and the attention's keys and values over the source. `batch` and `max_len`
        are the interface's: the state has no length to preallocate."""
        return [LayerCache(RecurrentState(), StaticKV())]


__all__ = ["CELLS", "MATCHES", "RNNEncoderDecoder", "build_decoder", "build_rnn"]
