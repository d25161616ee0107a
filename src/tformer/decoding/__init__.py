"""Decoding: turning a trained model into output sequences. For the encoder-decoder, `greedy` and
`beam_search`, batched across sentences and incremental (key/value caches) by default; for a language model,
`generate`, or `speculative_generate` with a small draft model proposing tokens (speculative.py). How to
decode is one frozen settings object (`DecodeConfig`, `SampleConfig`: settings.py), and a model travels with
its decoding state as a `Decoder` (decoder.py): on CUDA every search replays a captured decoding step
(`captured.py`), kept by the decoder across calls."""

from tformer.decoding.beam import Hypothesis, beam_search, length_penalty
from tformer.decoding.captured import DecodeGraphs
from tformer.decoding.constraints import Repetition
from tformer.decoding.decoder import Decoder
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
from tformer.decoding.search import best_hypotheses, best_tokens, sample
from tformer.decoding.settings import DecodeConfig, SampleConfig, with_given
from tformer.decoding.speculative import Draft, SpeculativeStats, speculative_generate

__all__ = ["DecodeConfig", "DecodeGraphs", "Decoder", "SampleConfig", "best_hypotheses", "best_tokens", "sample",
           "with_given"]
__all__ += ["Hypothesis", "Repetition", "beam_search", "greedy", "length_penalty"]
__all__ += ["apply_temperature", "generate", "generate_greedy", "sample_next", "top_k_filter", "top_p_filter"]
__all__ += ["Draft", "SpeculativeStats", "speculative_generate"]
__all__ += ["SequenceScore", "TextScore", "conditional_log_probs", "rerank", "score_sequences", "score_texts",
            "token_log_probs"]
