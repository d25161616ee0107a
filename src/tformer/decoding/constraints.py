"""What may come next: changes to the next-token scores that every search applies the same way.

    Repetition(no_repeat_ngram_size=n)   a token that would complete an n-gram already in the history is
                                         banned (score -inf), as fairseq's and Hugging Face's option
    Repetition(penalty=p)                each token already in the history has its score s made worse:
                                         s * p if s < 0, s / p otherwise (Keskar et al. 2019, CTRL,
                                         https://arxiv.org/abs/1909.05858); p = 1 is off
    force(scores, forced)                a row with a forced token keeps only that token, at its own score

The scores are what the search ranks: log-probabilities in greedy and beam search (all <= 0, so the
penalty multiplies them, as Hugging Face's beam search does), logits in sampling (as its sampling and the
CTRL paper do; the softmax renormalises). The history is the tokens a row holds so far: the target prefix
in translation; the prompt and what was generated in generation. -1 marks a place that holds no token
(left padding), which matches nothing.

A forced prefix (`decoding.beam`, `decoding.greedy`) is exact: each forced token enters with the model's
own log-probability and the tokens after it are searched as usual, so forcing the model's own output gives
that output back with the same scores.

N rows, V vocabulary, T history length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from tformer.errors import UserError

NONE = -1  # a history place without a token; a row's forced token where it has none


@dataclass(frozen=True)
class Repetition:
    no_repeat_ngram_size: int = 0  # 0: off; n >= 1 bans any n-gram from appearing twice
    penalty: float = 1.0  # 1: off; > 1 discourages tokens seen before

    def __post_init__(self) -> None:
        n = self.no_repeat_ngram_size
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise UserError(f"no_repeat_ngram_size={n!r} must be an integer >= 0 (0 = off)")
        if not (isinstance(self.penalty, int | float) and math.isfinite(self.penalty) and self.penalty >= 1):
            raise UserError(f"repetition_penalty={self.penalty!r} must be a finite number >= 1 (1 = off)")

    @property
    def off(self) -> bool:
        return self.no_repeat_ngram_size == 0 and self.penalty == 1

    def apply(self, scores: Tensor, history: Tensor) -> Tensor:
        """scores (N, V), history (N, T) token ids (NONE: no token) -> the scores with repeats penalised
        and repeated n-grams banned (a new tensor; `scores` is left as it is)."""
        if self.off or history.shape[1] == 0:
            return scores
        out = scores
        if self.penalty != 1:
            out = _penalise(out, history, self.penalty)
        if self.no_repeat_ngram_size:
            out = _ban_repeated_ngrams(out, history, self.no_repeat_ngram_size)
        return out


def _with_sink(scores: Tensor) -> Tensor:
    """(N, V) -> (N, V + 1): a last column where writes for NONE land, dropped afterwards."""
    return torch.cat([scores, scores.new_zeros(scores.shape[0], 1)], dim=1)


def _penalise(scores: Tensor, history: Tensor, penalty: float) -> Tensor:
    vocab = scores.shape[1]
    index = torch.where(history < 0, vocab, history)  # (N, T): NONE -> the sink
    ext = _with_sink(scores)  # (N, V + 1)
    seen = ext.gather(1, index)  # (N, T); a token seen twice is penalised once: every write is the same value
    ext.scatter_(1, index, torch.where(seen < 0, seen * penalty, seen / penalty))
    return ext[:, :vocab]


def _ban_repeated_ngrams(scores: Tensor, history: Tensor, n: int) -> Tensor:
    """Ban v where history[-(n-1):] + [v] is an n-gram of history (n = 1: every token seen)."""
    vocab, length = scores.shape[1], history.shape[1]
    if length < n - 1:
        return scores
    if n == 1:
        banned = history  # (N, T)
    else:
        last = history[:, length - (n - 1):]  # (N, n-1): the n-gram so far
        starts = history.unfold(1, n - 1, 1)[:, : length - (n - 1)]  # (N, T-n+1, n-1): each earlier (n-1)-gram
        same = (starts == last[:, None]).all(dim=2) & (last >= 0).all(dim=1, keepdim=True)  # (N, T-n+1)
        banned = torch.where(same, history[:, n - 1:], NONE)  # (N, T-n+1): the token that followed a match
    index = torch.where(banned < 0, vocab, banned)
    ext = _with_sink(scores)
    ext.scatter_(1, index, float("-inf"))
    return ext[:, :vocab]


def force(scores: Tensor, forced: Tensor | None, own: Tensor) -> Tensor:
    """scores (N, V), forced (N,) a token id or NONE (None: no row forced) -> rows with a forced token: -inf
    but at that token, which takes its score from `own` (N, V), the model's own log-probabilities (a repeat
    the user asked for is not penalised); other rows as they are."""
    if forced is None:
        return scores
    free = forced < 0  # (N,)
    if bool(free.all()):
        return scores
    index = forced.clamp(min=0)[:, None]  # (N, 1)
    only = torch.full_like(scores, float("-inf")).scatter_(1, index, own.gather(1, index))  # (N, V)
    return torch.where(free[:, None], scores, only)


def prefix_table(prefixes: Sequence[Sequence[int]] | None, *, rows: int, eos_id: int, max_len: int,
                 device: torch.device) -> Tensor | None:
    """Per-sentence forced target prefixes -> (B, L) ids padded with NONE, or None when no sentence has one.
    A prefix may not hold the end symbol and must leave room for one more token in the model's context."""
    if prefixes is None or not any(prefixes):
        return None
    if len(prefixes) != rows:
        raise UserError(f"{len(prefixes)} prefixes for {rows} sentences; give one (possibly empty) per sentence")
    for i, p in enumerate(prefixes):
        if eos_id in p:
            raise UserError(f"prefix {i} holds the end symbol (id {eos_id}); a prefix is the start of the output")
        if len(p) >= max_len:
            raise UserError(f"prefix {i} is {len(p)} tokens; the model writes at most max_len={max_len}, so a "
                            f"prefix may hold at most {max_len - 1}")
    width = max(len(p) for p in prefixes)
    table = torch.full((rows, width), NONE, dtype=torch.long)
    for i, p in enumerate(prefixes):
        table[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
    return table.to(device)


def forced_at(table: Tensor | None, sentence: Tensor, step: int) -> Tensor | None:
    """The token each row must take at `step` (NONE: free), or None when no row is forced any more.
    table (B, L) from `prefix_table`, sentence (N,) the sentence of each row."""
    if table is None or step >= table.shape[1]:
        return None
    return table[sentence, step]  # (N,)


def with_prefix_room(limits: list[int], prefixes: Sequence[Sequence[int]] | None, *, cap: int) -> list[int]:
    """Maximum target lengths raised so that each sentence can write its prefix and one token more (at most
    `cap`, the model's context)."""
    if not prefixes:
        return limits
    return [max(limit, min(len(p) + 1, cap)) for limit, p in zip(limits, prefixes, strict=True)]


__all__ = ["NONE", "Repetition", "force", "forced_at", "prefix_table", "with_prefix_room"]
