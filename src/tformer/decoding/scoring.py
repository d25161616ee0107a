"""Scoring text: log-probabilities under a causal Transformer (GPT) and under the encoder-decoder.

The NADE view (Larochelle & Murray 2011, https://proceedings.mlr.press/v15/larochelle11a.html): a causal
Transformer is a neural autoregressive density estimator,

    p(x) = prod_t p(x_t | x_<t),       p(x_t | x_<t) = softmax(f_{t-1}(x_<=t-1))[x_t]

where the causal mask makes the logits at position t-1 a function of the prefix x_<t only. So one forward
pass over x scores every token at once, and the scores of all sequences of a given length sum to one.

    token_log_probs     (B, T) log p(x_t | x_<t); with `bos_id` a start token is prepended so x_0 is scored
    score_sequences     per sequence: total log-prob (nats), token count, perplexity exp(-log_prob / n)
    score_texts         the same for strings, plus bits per character and per UTF-8 byte
    conditional_log_probs   encoder-decoder: log p(y | x) = sum_t log p(y_t | y_<t, x), end symbol included
    rerank              candidates sorted by length-normalised log p(y | x), scored as beam search scores

Long sequences (more than the model's `max_len` positions) are scored with a sliding window, as in the
Hugging Face perplexity guide (https://huggingface.co/docs/transformers/perplexity): windows of `max_len`
tokens start every `stride` positions; each token is scored once, in the first window that holds it at a
position > 0, so every token past the first window sees at least `max_len - stride` tokens of context.
Each window is a fresh sequence (positions from 0). Smaller strides give more context and cost more passes.

B batch, T length, N length with the start token, n window (max_len), V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from tformer.data.device import device_of
from tformer.data.padding import pad, valid_mask
from tformer.decoding.beam import LENPEN_KINDS, Hypothesis, length_penalty
from tformer.decoding.steps import eval_mode
from tformer.errors import UserError

if TYPE_CHECKING:
    from tformer.tokenization import Tokenizer


@dataclass(frozen=True)
class SequenceScore:
    log_prob: float  # total log-probability in nats of the scored tokens
    n_tokens: int  # how many tokens were scored: all of them with a start token, else all but the first
    token_log_probs: Tensor  # (n_tokens,) log p(x_t | x_<t) of each scored token, in order

    @property
    def perplexity(self) -> float:
        """exp of the mean negative log-likelihood per scored token."""
        return math.exp(-self.log_prob / self.n_tokens)


@dataclass(frozen=True)
class TextScore(SequenceScore):
    n_chars: int  # characters of the text (Python str length)
    n_bytes: int  # bytes of its UTF-8 encoding

    @property
    def bits_per_char(self) -> float:
        return -self.log_prob / math.log(2) / self.n_chars

    @property
    def bits_per_byte(self) -> float:
        return -self.log_prob / math.log(2) / self.n_bytes


def _direct_log_probs(model: nn.Module, seq: Tensor) -> Tensor:
    """seq (B, N) with N <= max_len -> (B, N): log p(seq_j | seq_<j) at j >= 1, 0 at j = 0."""
    logits = model(seq)  # (B, N, V)
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, N - 1, V): predicts seq[:, 1:]
    picked = log_probs.gather(-1, seq[:, 1:, None]).squeeze(-1)  # (B, N - 1)
    return torch.cat([picked.new_zeros(seq.shape[0], 1), picked], dim=1)  # (B, N)


def _windowed_log_probs(model: nn.Module, seq: Tensor, *, window: int, stride: int) -> Tensor:
    """seq (B, N) of any length -> (B, N), scoring each position j >= 1 once (see the module docstring)."""
    length = seq.shape[1]
    if length <= window:
        return _direct_log_probs(model, seq)
    out = seq.new_zeros(seq.shape, dtype=torch.float32)  # (B, N)
    scored_to = 1  # positions < scored_to are done (position 0 has no context and is never scored)
    for begin in range(0, length, stride):
        end = min(begin + window, length)
        out[:, scored_to:end] = _direct_log_probs(model, seq[:, begin:end])[:, scored_to - begin:]
        scored_to = end
        if end == length:
            break
    return out


@torch.inference_mode()
def token_log_probs(model: nn.Module, ids: Tensor, *, valid: Tensor | None = None, bos_id: int | None = None,
                    stride: int | None = None) -> Tensor:
    """log p(x_t | x_<t) of every token of a right-padded batch under a causal LM: ids (B, T) -> (B, T) float32.

    `valid` (B, T) is True at real tokens (None: all real); it must be right-padded (real tokens first).
    Without `bos_id`, position 0 has no context and gets 0; with it, a start token is prepended, so x_0 is
    scored as log p(x_0 | <s>). Padded positions get 0. Right padding never changes the real positions'
    scores (causal attention does not look ahead), so a batch gives the numbers of one sequence at a time.
    Sequences longer than the model's `max_len` (with the start token) use a sliding window moving by
    `stride` (None: max_len // 2), each token seeing at least max_len - stride tokens of context."""
    window = model.config.max_len
    stride = max(window // 2, 1) if stride is None else stride
    if not isinstance(stride, int) or not 1 <= stride < window:
        raise UserError(f"stride={stride!r} must be an integer in [1, max_len={window}): each window after "
                         f"the first must keep some context")
    if ids.dim() != 2:
        raise UserError(f"ids must be a (batch, length) tensor of token ids, got shape {tuple(ids.shape)}")
    if valid is None:
        valid = torch.ones_like(ids, dtype=torch.bool)
    if valid.shape != ids.shape:
        raise UserError(f"valid has shape {tuple(valid.shape)}, expected the shape of ids {tuple(ids.shape)}")
    if (valid[:, 1:] & ~valid[:, :-1]).any():
        raise UserError("valid must be right-padded: in each row, real tokens first, then padding")
    with eval_mode(model):
        seq = ids if bos_id is None else torch.cat([ids.new_full((ids.shape[0], 1), bos_id), ids], dim=1)
        out = _windowed_log_probs(model, seq, window=window, stride=stride)  # (B, N)
        if bos_id is not None:
            out = out[:, 1:]  # (B, T): drop the start token's (unscored) slot
        return out.masked_fill(~valid, 0.0)


def score_sequences(model: nn.Module, sequences: Sequence[Sequence[int]], *, bos_id: int | None = None,
                    batch_size: int = 16, stride: int | None = None) -> list[SequenceScore]:
    """Score token sequences under a causal LM, `batch_size` at a time (right-padded); one `SequenceScore`
    per sequence, in order. Without `bos_id` the first token is context only (not scored), so a sequence
    needs at least two tokens; with it (e.g. `model.config.bos_id`), every token is scored."""
    if batch_size < 1:
        raise UserError(f"batch_size={batch_size!r} must be a positive integer")
    first = 0 if bos_id is not None else 1
    for i, seq in enumerate(sequences):
        if len(seq) <= first:
            raise UserError(f"sequence {i} has {len(seq)} token(s) and nothing to score"
                             + ("" if bos_id is not None else "; without bos_id the first token is not scored"))
    pad_id = getattr(model.config, "pad_id", 0)
    device = device_of(model)
    scores: list[SequenceScore] = []
    for start in range(0, len(sequences), batch_size):
        chunk = [list(s) for s in sequences[start:start + batch_size]]
        ids = pad(chunk, pad_id, device=device)  # (B, T)
        valid = valid_mask([len(s) for s in chunk], width=ids.shape[1], device=device)  # (B, T)
        out = token_log_probs(model, ids, valid=valid, bos_id=bos_id, stride=stride).cpu()  # (B, T)
        for row, seq in zip(out, chunk, strict=True):
            picked = row[first:len(seq)].clone()  # (n_tokens,)
            scores.append(SequenceScore(log_prob=float(picked.double().sum()), n_tokens=len(picked),
                                        token_log_probs=picked))
    return scores


def score_texts(model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str], *, bos: bool = True,
                batch_size: int = 16, stride: int | None = None) -> list[TextScore]:
    """Score strings under a causal LM: `score_sequences` of their tokens, plus bits per character
    (-log_prob / ln 2 / chars) and per UTF-8 byte, which compare models with different tokenizers. With
    `bos` (default) the tokenizer's start token is prepended so every character is paid for; without it the
    first token is free and the bits per character are an underestimate."""
    if any(not text for text in texts):
        raise UserError("cannot score an empty text: bits per character need at least one character")
    encoded = tokenizer.encode_batch(list(texts))
    scores = score_sequences(model, encoded, bos_id=tokenizer.bos_id if bos else None, batch_size=batch_size,
                             stride=stride)
    return [TextScore(log_prob=s.log_prob, n_tokens=s.n_tokens, token_log_probs=s.token_log_probs,
                      n_chars=len(text), n_bytes=len(text.encode("utf-8")))
            for s, text in zip(scores, texts, strict=True)]


# --- the encoder-decoder: log p(y | x) -----------------------------------------------------------------

@torch.inference_mode()
def conditional_log_probs(model: nn.Module, src_ids_batch: Sequence[Sequence[int]],
                          tgt_ids_batch: Sequence[Sequence[int]], *, eos: bool = True,
                          batch_size: int = 32) -> list[float]:
    """log p(y | x) = sum_t log p(y_t | y_<t, x) under an encoder-decoder, by teacher forcing:

        decoder input   [decoder_start] + y
        scored tokens   y + [eos]          (without `eos`: y only, as a hypothesis cut at the maximum length)

    Targets are token ids without start or end symbols (as `Hypothesis.tokens`); the result equals beam
    search's `Hypothesis.log_prob` for the same tokens. One float per (source, target) pair, in order."""
    if len(src_ids_batch) != len(tgt_ids_batch):
        raise UserError(f"{len(src_ids_batch)} sources but {len(tgt_ids_batch)} targets; give one target "
                         f"per source")
    config = model.config
    for i, (src, tgt) in enumerate(zip(src_ids_batch, tgt_ids_batch, strict=True)):
        if not any(t != config.pad_id for t in src):
            raise UserError(f"source {i} has no token other than pad_id={config.pad_id}")
        if not tgt and not eos:
            raise UserError(f"target {i} is empty and eos=False: nothing to score")
    device = device_of(model)
    out: list[float] = []
    with eval_mode(model):
        for start in range(0, len(src_ids_batch), batch_size):
            sources = src_ids_batch[start:start + batch_size]
            targets = [list(y) + [config.eos_id] * eos for y in tgt_ids_batch[start:start + batch_size]]
            inputs = [[config.decoder_start_id] + y[:-1] for y in targets]
            src = pad(sources, config.pad_id, device=device)  # (B, S)
            tgt_in = pad(inputs, config.pad_id, device=device)  # (B, T)
            tgt_out = pad(targets, config.pad_id, device=device)  # (B, T)
            log_probs = torch.log_softmax(model(src, tgt_in).float(), dim=-1)  # (B, T, V)
            picked = log_probs.gather(-1, tgt_out[:, :, None]).squeeze(-1)  # (B, T)
            real = valid_mask([len(y) for y in targets], width=tgt_out.shape[1], device=device)  # (B, T)
            out.extend(picked.masked_fill(~real, 0.0).double().sum(dim=1).tolist())
    return out


def rerank(model: nn.Module, source_ids: Sequence[int], candidates: Sequence[Sequence[int]], *,
           lenpen: float = 0.0, lenpen_kind: str = "fairseq", batch_size: int = 32) -> list[Hypothesis]:
    """Candidate translations of one source, best first, as `Hypothesis` (end symbol included): ranked by
    log p(y | x) / lp(len(y) + 1), beam search's score (`length_penalty`; lenpen 0: the raw log-prob).
    Ties keep the candidates' order."""
    if lenpen_kind not in LENPEN_KINDS:
        raise UserError(f"lenpen_kind={lenpen_kind!r} is not allowed; choose one of {', '.join(LENPEN_KINDS)}")
    if not candidates:
        return []
    log_probs = conditional_log_probs(model, [source_ids] * len(candidates), candidates, batch_size=batch_size)
    hyps = [Hypothesis(tokens=list(y), log_prob=lp, eos=True,
                       score=lp / length_penalty(len(y) + 1, lenpen=lenpen, kind=lenpen_kind))
            for y, lp in zip(candidates, log_probs, strict=True)]
    return sorted(hyps, key=lambda h: h.score, reverse=True)


__all__ = ["SequenceScore", "TextScore", "conditional_log_probs", "rerank", "score_sequences", "score_texts",
           "token_log_probs"]
