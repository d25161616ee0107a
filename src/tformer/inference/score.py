"""Scoring lines of text with a trained checkpoint (`tformer score`): under a GPT, each line's
log-likelihood (with perplexity and bits per character and per byte); under an encoder-decoder,
log p(target | source) of each `source<TAB>target` line. The sums are `decoding.scoring`'s; here the text
is read, split and checked against the model's context, with errors that name the file and line."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn

from tformer.data.lines import CHARS_PER_TOKEN, normalise_text, read_lines, source_name
from tformer.decoding import TextScore, conditional_log_probs, score_sequences
from tformer.errors import UserError
from tformer.tokenization import Tokenizer


def read_scored_lines(path: str | os.PathLike) -> dict[int, str]:
    """The non-empty lines of a UTF-8 file (`data.lines.read_lines`), by their line numbers in the file (from
    1), so that results and errors name the file's own lines; a ValueError if there are none."""
    lines = {number: line for number, line in enumerate(read_lines(path), 1) if line.strip()}
    if not lines:
        raise UserError(f"{source_name(path)} has no non-empty line to score")
    return lines


def score_lines(model: nn.Module, tokenizer: Tokenizer, lines: list[str]) -> list[TextScore]:
    """Each line's score under a GPT, read as a document (after the model's start token, if it has one,
    so every token is scored; without one the first token is context only). A line's leading byte-order mark
    is dropped (`data.lines.normalise_text`)."""
    lines = [normalise_text(line) for line in lines]
    scores = score_sequences(model, [tokenizer.encode(line) for line in lines], bos_id=model.config.bos_id)
    return [TextScore(log_prob=s.log_prob, n_tokens=s.n_tokens, token_log_probs=s.token_log_probs,
                      n_chars=len(line), n_bytes=len(line.encode())) for s, line in zip(scores, lines, strict=True)]


def total_score(scores: Sequence[TextScore]) -> TextScore:
    """The scored lines together, as one text: their log-likelihoods, tokens, characters and bytes summed, so
    that its perplexity and bits per character and per byte are over all of them (`tformer score`'s `all`
    row)."""
    return TextScore(log_prob=sum(s.log_prob for s in scores), n_tokens=sum(s.n_tokens for s in scores),
                     token_log_probs=torch.cat([s.token_log_probs for s in scores]) if scores else torch.zeros(0),
                     n_chars=sum(s.n_chars for s in scores), n_bytes=sum(s.n_bytes for s in scores))


def token_scores(tokenizer: Tokenizer, line: str, score: TextScore) -> list[tuple[str, float]]:
    """(token text, log p(x_t | x_<t)) of each scored token of `line` (as `score_lines` read it), in order."""
    ids = tokenizer.encode(normalise_text(line))  # without a start token the first one is context, not scored
    scored = ids[len(ids) - score.n_tokens :]
    return [(tokenizer.decode([token]), lp) for token, lp in zip(scored, score.token_log_probs.tolist(), strict=True)]


def score_pairs(model: nn.Module, tokenizer: Tokenizer, lines: list[str], *, where: str | os.PathLike,
                numbers: list[int] | None = None) -> list[float]:
    """log p(target | source) of each `source<TAB>target` line under an encoder-decoder, the target's end
    token included. Errors name the line as `where:number` (`numbers`: the lines' numbers in the file
    `where`; default 1, 2, ...). Each side's leading byte-order mark is dropped (`data.lines.normalise_text`)."""
    max_len = model.config.max_len
    numbers = numbers or list(range(1, len(lines) + 1))
    pairs = [[normalise_text(side) for side in line.split("\t")] for line in lines]
    bad = next((i for i, p in enumerate(pairs) if len(p) != 2), None)
    if bad is not None:
        raise UserError(f"{where}:{numbers[bad]}: expected source<TAB>target for an encoder-decoder")
    limit = max_len * CHARS_PER_TOKEN  # longer than the context at any tokenization: refused untokenized
    for i, pair in zip(numbers, pairs, strict=True):
        for side, text in zip(("source", "target"), pair, strict=True):
            if len(text) > limit:
                raise UserError(f"{where}:{i}: the {side} is {len(text)} characters, more than the model's context "
                                f"max_len={max_len} can hold ({limit}, at {CHARS_PER_TOKEN} characters a token)")
    sources, targets = [tokenizer.encode(s) for s, _ in pairs], [tokenizer.encode(t) for _, t in pairs]
    for i, src, tgt in zip(numbers, sources, targets, strict=True):  # the target gets an end token
        if len(src) > max_len or len(tgt) + 1 > max_len:
            side, n = ("source", len(src)) if len(src) > max_len else ("target", len(tgt) + 1)
            raise UserError(f"{where}:{i}: the {side} is {n} tokens, longer than the model's context "
                             f"max_len={max_len}")
    return conditional_log_probs(model, sources, targets)


__all__ = ["read_scored_lines", "score_lines", "score_pairs", "token_scores", "total_score"]
