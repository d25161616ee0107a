"""Decoding: turning a trained model into output sequences. For the encoder-decoder, `greedy` and
`beam_search`, batched across sentences and incremental (key/value caches) by default."""

from tformer.decoding.beam import Hypothesis, beam_search, length_penalty
from tformer.decoding.greedy import greedy

__all__ = ["Hypothesis", "beam_search", "greedy", "length_penalty"]
