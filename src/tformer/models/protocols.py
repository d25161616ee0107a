"""What the two translators share: the Transformer `EncoderDecoder` (models/seq2seq.py) and the
`RNNEncoderDecoder` (models/rnn.py) are different networks behind one interface, and greedy search, beam
search and scoring (`tformer.decoding`) use only this interface, so they translate with either.

    memory = encode(src, src_valid)                              (B, S) ids -> (B, S', d)
    logits = decode(tgt, memory, src_valid, caches=, offset=)    (B, T) decoder inputs -> (B, T, V)
    caches = new_caches(batch, max_len)                          what decoding one position at a time keeps
    logits = forward(src, tgt)                                   teacher forcing: encode, then decode all of tgt

B batch, S source length, T target length, d width, V vocabulary. The memory is the decoder's view of the
source: the Transformer's encoder output (S' = S), or the RNN's encoder states followed by its final states
(S' > S); only the model that made it reads it. Both are `nn.Module`s besides (eval, train, parameters).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor

from tformer.nn.kv_cache import LayerCache


@runtime_checkable
class TranslatorConfig(Protocol):
    """The fields of a translator's config that decoding reads: the sizes of what it allocates and the
    special ids it starts, pads and stops with (`Seq2SeqConfig` and `RNNSeq2SeqConfig` both hold them)."""

    vocab_size: int
    d_model: int
    max_len: int  # the longest source it reads and target it writes
    pad_id: int
    bos_id: int
    eos_id: int
    decoder_start_id: int | None  # the first decoder input; set to bos_id when the config is built if None


@runtime_checkable
class Translator(Protocol):
    """An encoder-decoder that decoding can drive; see the module docstring for the shapes."""

    config: TranslatorConfig

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> Tensor: ...

    def decode(self, tgt: Tensor, memory: Tensor, src_valid: Tensor, *, caches: list[LayerCache] | None = None,
               offset: int = 0) -> Tensor: ...

    def new_caches(self, batch: int, max_len: int) -> list[LayerCache]: ...

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor: ...


__all__ = ["Translator", "TranslatorConfig"]
