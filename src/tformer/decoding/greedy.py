"""Greedy decoding for the encoder-decoder.

    memory = encode(x)                                   once per batch
    y_t = argmax_v log p(v | y_<t, x)                    one decoder step per target position

Each step is `steps.next_scores` (the logits: their argmax is the log-probabilities'; `next_log_probs`
when a repetition rule needs the log-probabilities), incremental (cached) by default. A sentence with n real
source tokens gets at most `int(max_len_a * n + max_len_b)` target tokens (fairseq's convention, see
`steps.py`), capped by the model's `max_len`. A row stops at the end symbol or at its maximum; the batch
stops when every row has, and finished rows leave the batch. Captured (`capture`, by default on CUDA): the
same tokens from fixed-shape steps replayed as a CUDA graph, no row leaving the batch (`static.greedy_fixed`).

B batch (sentences), S source length, t tokens generated so far, N rows still decoding, d width.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from tformer.decoding.constraints import Repetition, force, forced_at
from tformer.decoding.decoder import Decoder, decoder_of
from tformer.decoding.sampling import best
from tformer.decoding.static import greedy_fixed
from tformer.decoding.steps import encode_source, eval_mode, next_log_probs, next_scores, reorder_rows


@torch.inference_mode()
def greedy(model: nn.Module | Decoder, src: Tensor, *, max_len_a: float = 1.2, max_len_b: int = 10,
           use_cache: bool = True, repetition: Repetition | None = None,
           prefixes: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """Greedy translations of a padded batch `src` (B, S) (padding = config.pad_id).

    Returns one token list per sentence, without the start symbol and without the end symbol. A sentence
    with n real tokens gets at most int(max_len_a * n + max_len_b) tokens (see the module docstring).
    `repetition`: repeats penalised or banned; `prefixes`: per sentence, the tokens its translation must
    start with (an empty one: none), which are part of what it returns (`constraints.py`).
    `use_cache` decodes incrementally (same tokens, fewer FLOPs). `model`: a model, or a `Decoder` holding
    it with its decoding layout and captured steps across calls, which also says whether to capture (a forced
    prefix's steps run outside the graph)."""
    decoder = decoder_of(model)
    model = decoder.model
    config = model.config
    captured = decoder.fixed(use_cache=use_cache)
    with eval_mode(model, rows=src.shape[0], layout=decoder.layout):
        src_valid, memory, limits, forced = encode_source(model, src, max_len_a=max_len_a, max_len_b=max_len_b,
                                                          prefixes=prefixes)  # (B, S), (B, S, d)
        if captured:
            return greedy_fixed(model, memory, src_valid, limits=limits, forced=forced, repetition=repetition,
                                graphs=decoder.graphs)
        caches = model.new_caches(src.shape[0], max(limits)) if use_cache else None
        sentence = torch.arange(src.shape[0], device=memory.device)  # (N,) sentence of each live row
        limit = torch.tensor(limits, device=memory.device)  # (B,)
        prefix = torch.empty(src.shape[0], 0, dtype=torch.long, device=memory.device)  # (N, t)
        out: list[list[int]] = [[] for _ in limits]
        for step in range(max(limits)):
            if repetition is None:  # the argmax of the logits is the argmax of the log-probabilities
                scores = own = next_scores(model, prefix, memory, src_valid, caches=caches)  # (N, V)
            else:
                own = next_log_probs(model, prefix, memory, src_valid, caches=caches)  # (N, V)
                scores = repetition.apply(own, prefix)
            token = best(force(scores, forced_at(forced, sentence, step), own))  # (N,)
            prefix = torch.cat([prefix, token[:, None]], dim=1)  # (N, t + 1)
            done = (token == config.eos_id) | (limit[sentence] <= step + 1)  # (N,)
            for row in done.nonzero().flatten().tolist():
                tokens = prefix[row].tolist()
                out[int(sentence[row])] = tokens[:-1] if tokens[-1] == config.eos_id else tokens
            if done.all():
                break
            if done.any():  # drop finished rows from the batch, caches included
                keep = (~done).nonzero().flatten()
                sentence, prefix, memory, src_valid = reorder_rows(keep, caches, sentence, prefix, memory,
                                                                   src_valid)
        return out
