"""Decoding: turning a trained model into output sequences. For the encoder-decoder, `greedy` and
`beam_search`, batched across sentences and incremental (key/value caches) by default. On CUDA every search
replays a captured decoding step (`captured.py`); `DecodeGraphs` keeps those graphs across calls."""

from tformer.decoding.beam import Hypothesis, beam_search, length_penalty
from tformer.decoding.captured import DecodeGraphs
from tformer.decoding.constraints import Repetition
from tformer.decoding.generate import generate, generate_greedy
from tformer.decoding.greedy import greedy
from tformer.decoding.sampling import apply_temperature, sample_next, top_k_filter, top_p_filter
from tformer.decoding.scoring import (
    SequenceScore,
    TextScore,
    conditional_log_probs,
    rerank,
    score_sequences,
    score_texts,
    token_log_probs,
)

__all__ = ["DecodeGraphs", "Hypothesis", "Repetition", "beam_search", "greedy", "length_penalty"]
__all__ += ["apply_temperature", "generate", "generate_greedy", "sample_next", "top_k_filter", "top_p_filter"]
__all__ += ["SequenceScore", "TextScore", "conditional_log_probs", "rerank", "score_sequences", "score_texts",
            "token_log_probs"]
