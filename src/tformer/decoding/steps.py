"""The steps every search over a model shares: greedy and beam search over the encoder-decoder, generation
and scoring.

    eval_mode(model)                       dropout off (and the decoding layout for one row) meanwhile
    source_lengths, max_lengths            how many target tokens each sentence may get
    encode_source(model, src, ...)         a translation search's start: lengths, forced prefixes, encoder
    next_log_probs(model, prefix, ...)     log p(v | y_<t, x) for every row: one decoder step
    next_scores(model, prefix, ...)        the same step's logits, pad never proposed: greedy's argmax
                                           needs no normalisation
    last_log_probs(logits, ...)            its last part: logits -> log-probabilities, pad never proposed
    next_logits(model, ids, valid, ...)    GPT generation's step: logits of the token after each prompt
    reorder_rows(index, caches, ...)       keep / repeat / permute rows, caches included
    reorder_sources(index, caches, ...)    keep / permute the sources beams share

Incremental decoding: with caches, each step feeds only the newest token (at position `offset` = step) and
the decoder's self-attention keys/values for earlier positions come from a preallocated `KVCache`; the
cross-attention keys/values over the source are computed at the first step and kept in a `StaticKV`.
Without caches, every step re-runs the whole prefix. Both give the same tokens.

Maximum length, fairseq's convention: a sentence with n real source tokens gets at most
`int(max_len_a * n + max_len_b)` target tokens (the end symbol not counted), capped by the model's
`max_len`.

B batch (sentences), S source length, t tokens generated so far, N rows still decoding, V vocabulary, d width.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn

from tformer.decoding.constraints import prefix_table, with_prefix_room
from tformer.decoding.layout import DecodingLayout
from tformer.errors import UserError
from tformer.models.gpt import left_padded_positions
from tformer.nn.kv_cache import LayerCache


@contextmanager
def eval_mode(model: nn.Module, *, rows: int | None = None, layout: DecodingLayout | None = None) -> Iterator[None]:
    """Run the body with dropout off, then give the model back its train/eval mode. A decoder that runs
    one row at a time (`rows` == 1) gets the weights in the decoding layout (`layout.py`) meanwhile: that
    layout speeds up matrix-vector products but slows down products with a few rows. `layout`: the model's
    own, kept by its holder across calls; None makes one for this call."""
    if layout is not None and layout.model is not model:
        raise ValueError("the decoding layout given belongs to another model; make one with DecodingLayout(model)")
    was_training = model.training
    model.eval()
    try:
        with (layout or DecodingLayout(model)).applied() if rows == 1 else nullcontext():
            yield
    finally:
        model.train(was_training)


def source_lengths(src: Tensor, *, pad_id: int) -> Tensor:
    """(B, S) padded ids -> (B,) real lengths; a ValueError if a sentence has no real token."""
    if src.dim() != 2:
        raise UserError(f"src must be a (batch, length) tensor of ids, got shape {tuple(src.shape)}")
    lengths = (src != pad_id).sum(dim=1)  # (B,)
    empty = (lengths == 0).nonzero().flatten().tolist()
    if src.shape[0] == 0 or empty:
        raise UserError(f"cannot decode an empty source: sentence(s) {empty or 'all'} have no token other "
                         f"than pad_id={pad_id}; each needs at least one real token")
    return lengths


def max_lengths(lengths: Tensor, *, max_len_a: float, max_len_b: int, limit: int) -> list[int]:
    """Per-sentence maximum target length int(a * n + b), capped at `limit` (the model's positions)."""
    out = [min(int(max_len_a * n + max_len_b), limit) for n in lengths.tolist()]
    if min(out) < 1:
        raise UserError(f"max_len_a={max_len_a}, max_len_b={max_len_b} allow no target token for a source "
                         f"of length {int(lengths[out.index(min(out))])}; the maximum length must be at least 1")
    return out


def encode_source(model: nn.Module, src: Tensor, *, max_len_a: float, max_len_b: int,
                  prefixes: Sequence[Sequence[int]] | None) -> tuple[Tensor, Tensor, list[int], Tensor | None]:
    """What greedy and beam search start from, for a padded batch `src` (B, S): the source's real positions
    (B, S), the encoder's output memory (B, S, d), each sentence's maximum target length (room made for its
    forced prefix) and the forced-prefix table (B, L) or None (`constraints.prefix_table`)."""
    config = model.config
    src_valid = src != config.pad_id  # (B, S)
    limits = max_lengths(source_lengths(src, pad_id=config.pad_id), max_len_a=max_len_a, max_len_b=max_len_b,
                         limit=config.max_len)
    forced = prefix_table(prefixes, rows=src.shape[0], eos_id=config.eos_id, max_len=config.max_len,
                          device=src.device)  # (B, L) or None
    limits = with_prefix_room(limits, prefixes, cap=config.max_len)
    return src_valid, model.encode(src, src_valid), limits, forced


def next_log_probs(model: nn.Module, prefix: Tensor, memory: Tensor, src_valid: Tensor, *,
                   caches: list[LayerCache] | None) -> Tensor:
    """log p(next token | start symbol + prefix, source) for every row: prefix (N, t) tokens generated so
    far, memory (N, S, d), src_valid (N, S) -> (N, V) float32. With caches, only the newest token is fed
    (positions 0..t-1 are cached); without, the whole prefix is. The pad token is never proposed."""
    config = model.config
    return last_log_probs(_decode_next(model, prefix, memory, src_valid, caches=caches), pad_id=config.pad_id,
                          eos_id=config.eos_id)


def next_scores(model: nn.Module, prefix: Tensor, memory: Tensor, src_valid: Tensor, *,
                caches: list[LayerCache] | None) -> Tensor:
    """As `next_log_probs`, the logits (N, V) float32 before their normalisation, the pad token at -inf
    (unless it is also the end symbol): the same argmax for a softmax-sized fraction of the step's time."""
    config = model.config
    scores = _decode_next(model, prefix, memory, src_valid, caches=caches)[:, -1].float()  # (N, V)
    return _without_pad(scores, pad_id=config.pad_id, eos_id=config.eos_id)


def _decode_next(model: nn.Module, prefix: Tensor, memory: Tensor, src_valid: Tensor, *,
                 caches: list[LayerCache] | None) -> Tensor:
    """The decoder's logits (N, T, V) for prefix (N, t): T = 1 with caches (the newest token), else t + 1."""
    start = prefix.new_full((prefix.shape[0], 1), model.config.decoder_start_id)
    inputs = torch.cat([start, prefix], dim=1)  # (N, t + 1)
    offset = 0
    if caches is not None:
        offset = prefix.shape[1]
        inputs = inputs[:, offset:]  # (N, 1): the newest token
    return model.decode(inputs, memory, src_valid, caches=caches, offset=offset)  # (N, T, V)


def last_log_probs(logits: Tensor, *, pad_id: int, eos_id: int) -> Tensor:
    """Decoder logits (N, T, V) -> log-probabilities (N, V) float32 of the token after the last position, the
    pad token never proposed (unless it is also the end symbol)."""
    log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (N, V)
    return _without_pad(log_probs, pad_id=pad_id, eos_id=eos_id)


def _without_pad(scores: Tensor, *, pad_id: int, eos_id: int) -> Tensor:
    """scores (N, V), the pad token's set to -inf in place (unless it is also the end symbol)."""
    if pad_id != eos_id:
        scores[:, pad_id] = float("-inf")
    return scores


def next_logits(model: nn.Module, ids: Tensor, valid: Tensor | None, *,
                caches: list[LayerCache] | None) -> Tensor:
    """GPT generation's step: logits (N, V) float32 of the token after each row of the left-padded ids (N, S),
    valid (N, S) (None: no padding, so no mask to apply and positions counted from 0). With caches, only the
    ids not cached yet are fed (all of them at prefill, then the newest one); without, the whole sequence is."""
    start = 0 if caches is None else caches[0].mixer_state.length
    positions = None if valid is None else left_padded_positions(valid)[:, start:]  # (N, T)
    logits = model(ids[:, start:], valid=valid, positions=positions, caches=caches, last=1)  # (N, 1, V)
    return logits[:, -1].float()


def reorder_rows(index: Tensor, caches: list[LayerCache] | None, *rows: Tensor,
                 same_sources: bool = False) -> list[Tensor]:
    """Keep / repeat / permute decoding rows: caches in place, tensors (N, ...) returned (len(index), ...).
    `same_sources`: the cross-attention caches stay as they are and only the self-attention ones move (every
    new row reads the same source as the old row in its place, beams permuted within their sentence; or the
    sources are kept once per sentence, moved by `reorder_sources`)."""
    for cache in caches or []:
        cache.reorder(index, cross=not same_sources)
    return [r.index_select(0, index) for r in rows]


def reorder_sources(index: Tensor, caches: list[LayerCache], *sources: Tensor) -> list[Tensor]:
    """Keep / permute the sources that beams share (`beam_steps.EagerSteps`): each layer's cross-attention
    keys and values, and the tensors (N, ...) given (memory, its mask), returned (len(index), ...)."""
    for cache in caches:
        if cache.cross_kv is not None:
            cache.cross_kv.reorder(index)
    return [s.index_select(0, index) for s in sources]
