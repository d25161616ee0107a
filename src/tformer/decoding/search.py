"""Decoding as one settings object says: an encoder-decoder's search as a `DecodeConfig` chooses it (greedy at
beam 1, else beam search), a language model's continuations as a `SampleConfig` draws them. What translating
text and writing text (`inference`), a server's batch and a recipe's evaluation all call.

B batch (sentences), S source length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn

from tformer.decoding.beam import Hypothesis, beam_search
from tformer.decoding.decoder import Decoder
from tformer.decoding.generate import generate
from tformer.decoding.greedy import greedy
from tformer.decoding.settings import DecodeConfig, SampleConfig
from tformer.decoding.speculative import Draft, SpeculativeStats, speculative_generate


def best_tokens(decoder: nn.Module | Decoder, src: Tensor, decode: DecodeConfig, *,
                prefixes: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """Each sentence's best translation of a padded batch `src` (B, S): its tokens, without the start and end
    symbols (greedy at decode.beam 1, else the beam search's best)."""
    common = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, repetition=decode.repetition,
                  prefixes=prefixes)
    if decode.beam == 1:
        return greedy(decoder, src, **common)
    return [h[0].tokens for h in beam_search(decoder, src, beam=decode.beam, lenpen=decode.lenpen,
                                             stopping=decode.stopping, **common)]


def best_hypotheses(decoder: nn.Module | Decoder, src: Tensor, decode: DecodeConfig, *, n_best: int,
                    prefixes: Sequence[Sequence[int]] | None = None) -> list[list[Hypothesis]]:
    """Each sentence's best `n_best` hypotheses, with their scores, best first: the beam search's. Beam 1 is
    the beam search with one beam and the "finished" rule, which is greedy decoding, scored."""
    stopping = "finished" if decode.beam == 1 else decode.stopping
    return beam_search(decoder, src, beam=decode.beam, lenpen=decode.lenpen, stopping=stopping, n_best=n_best,
                       max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, repetition=decode.repetition,
                       prefixes=prefixes)


def sample(decoder: nn.Module | Decoder, prompts: Sequence[Sequence[int]], settings: SampleConfig, *,
           max_new_tokens: int, eos_id: int | None = None, pad_id: int = 0,
           on_token: Callable[[int, int], None] | None = None, draft: Draft | None = None,
           stats: SpeculativeStats | None = None) -> list[list[int]]:
    """Each prompt's continuation (`decoding.generate`) drawn as `settings` say: at most `max_new_tokens` new
    tokens, stopping at `eos_id` where the settings stop at the end-of-text token and the model has one. With a
    `draft`, one prompt is decoded speculatively (`decoding.speculative`; its counts added to `stats`)."""
    stops = (eos_id,) if settings.stop and eos_id is not None else ()
    if draft is not None:
        return speculative_generate(decoder, draft.model, prompts, max_new_tokens=max_new_tokens,
                                    draft_tokens=draft.tokens, temperature=settings.temperature, top_k=settings.top_k,
                                    top_p=settings.top_p, seed=settings.seed, stop_tokens=stops, on_token=on_token,
                                    repetition=settings.repetition, stats=stats)
    return generate(decoder, prompts, max_new_tokens=max_new_tokens, temperature=settings.temperature,
                    top_k=settings.top_k, top_p=settings.top_p, seed=settings.seed, stop_tokens=stops, pad_id=pad_id,
                    on_token=on_token, repetition=settings.repetition)


__all__ = ["best_hypotheses", "best_tokens", "sample"]
