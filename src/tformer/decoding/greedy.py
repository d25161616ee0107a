"""Greedy decoding for the encoder-decoder, and the steps every search over it shares.

    memory = encode(x)                                   once per batch
    y_t = argmax_v log p(v | y_<t, x)                    one decoder step per target position

Incremental decoding: with caches, each step feeds only the newest token (at position `offset` = step) and
the decoder's self-attention keys/values for earlier positions come from a preallocated `KVCache`; the
cross-attention keys/values over the source are computed at the first step and kept in a `StaticKV`.
Without caches, every step re-runs the whole prefix. Both give the same tokens.

Maximum length, fairseq's convention: a sentence with n real source tokens gets at most
`int(max_len_a * n + max_len_b)` target tokens (the end symbol not counted), capped by the model's
`max_len`. A row stops at the end symbol or at its maximum; the batch stops when every row has.

B batch (sentences), S source length, t tokens generated so far, N rows still decoding, V vocabulary, d width.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn

from tformer.decoding.layout import decoding_layout
from tformer.nn.kv_cache import LayerCache


@contextmanager
def eval_mode(model: nn.Module, *, rows: int | None = None) -> Iterator[None]:
    """Run the body with dropout off, then give the model back its train/eval mode. A decoder that runs
    one row at a time (`rows` == 1) gets the weights in the decoding layout (`layout.py`) meanwhile: that
    layout speeds up matrix-vector products but slows down products with a few rows."""
    was_training = model.training
    model.eval()
    try:
        with decoding_layout(model) if rows == 1 else nullcontext():
            yield
    finally:
        model.train(was_training)


def source_lengths(src: Tensor, *, pad_id: int) -> Tensor:
    """(B, S) padded ids -> (B,) real lengths; a ValueError if a sentence has no real token."""
    if src.dim() != 2:
        raise ValueError(f"src must be a (batch, length) tensor of ids, got shape {tuple(src.shape)}")
    lengths = (src != pad_id).sum(dim=1)  # (B,)
    empty = (lengths == 0).nonzero().flatten().tolist()
    if src.shape[0] == 0 or empty:
        raise ValueError(f"cannot decode an empty source: sentence(s) {empty or 'all'} have no token other "
                         f"than pad_id={pad_id}; each needs at least one real token")
    return lengths


def max_lengths(lengths: Tensor, *, max_len_a: float, max_len_b: int, limit: int) -> list[int]:
    """Per-sentence maximum target length int(a * n + b), capped at `limit` (the model's positions)."""
    out = [min(int(max_len_a * n + max_len_b), limit) for n in lengths.tolist()]
    if min(out) < 1:
        raise ValueError(f"max_len_a={max_len_a}, max_len_b={max_len_b} allow no target token for a source "
                         f"of length {int(lengths[out.index(min(out))])}; the maximum length must be at least 1")
    return out


def next_log_probs(model: nn.Module, prefix: Tensor, memory: Tensor, src_valid: Tensor, *,
                   caches: list[LayerCache] | None) -> Tensor:
    """log p(next token | start symbol + prefix, source) for every row: prefix (N, t) tokens generated so
    far, memory (N, S, d), src_valid (N, S) -> (N, V) float32. With caches, only the newest token is fed
    (positions 0..t-1 are cached); without, the whole prefix is. The pad token is never proposed."""
    config = model.config
    start = prefix.new_full((prefix.shape[0], 1), config.decoder_start_id)
    inputs = torch.cat([start, prefix], dim=1)  # (N, t + 1)
    offset = 0
    if caches is not None:
        offset = prefix.shape[1]
        inputs = inputs[:, offset:]  # (N, 1): the newest token
    logits = model.decode(inputs, memory, src_valid, caches=caches, offset=offset)  # (N, T, V)
    log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (N, V)
    if config.pad_id != config.eos_id:
        log_probs[:, config.pad_id] = float("-inf")
    return log_probs


def reorder_rows(index: Tensor, caches: list[LayerCache] | None, *rows: Tensor,
                 same_sources: bool = False) -> list[Tensor]:
    """Keep / repeat / permute decoding rows: caches in place, tensors (N, ...) returned (len(index), ...).
    `same_sources`: every new row reads the same source as the old row in its place (beams permuted within
    their sentence), so the cross-attention caches stay as they are and only the self-attention ones move."""
    for cache in caches or []:
        cache.reorder(index, cross=not same_sources)
    return [r.index_select(0, index) for r in rows]


@torch.inference_mode()
def greedy(model: nn.Module, src: Tensor, *, max_len_a: float = 1.2, max_len_b: int = 10,
           use_cache: bool = True) -> list[list[int]]:
    """Greedy translations of a padded batch `src` (B, S) (padding = config.pad_id).

    Returns one token list per sentence, without the start symbol and without the end symbol. A sentence
    with n real tokens gets at most int(max_len_a * n + max_len_b) tokens (see the module docstring).
    `use_cache` decodes incrementally (same tokens, fewer FLOPs)."""
    config = model.config
    with eval_mode(model, rows=src.shape[0]):
        src_valid = src != config.pad_id  # (B, S)
        limits = max_lengths(source_lengths(src, pad_id=config.pad_id), max_len_a=max_len_a,
                             max_len_b=max_len_b, limit=config.max_len)
        memory = model.encode(src, src_valid)  # (B, S, d)
        caches = model.new_caches(src.shape[0], max(limits)) if use_cache else None
        sentence = torch.arange(src.shape[0], device=memory.device)  # (N,) sentence of each live row
        limit = torch.tensor(limits, device=memory.device)  # (B,)
        prefix = torch.empty(src.shape[0], 0, dtype=torch.long, device=memory.device)  # (N, t)
        out: list[list[int]] = [[] for _ in limits]
        for step in range(max(limits)):
            token = next_log_probs(model, prefix, memory, src_valid, caches=caches).argmax(dim=-1)  # (N,)
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
