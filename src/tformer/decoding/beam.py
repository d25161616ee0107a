"""Beam search for the encoder-decoder, batched across sentences (as fairseq's `SequenceGenerator`).

Each sentence keeps `beam` live hypotheses; the batch decodes them as B * beam rows. At every step:

    candidates = the best 2 * beam of  score(prefix) + log p(v | prefix, x)  over (prefix, v)
    an end-symbol candidate among the best `beam`  -> a finished hypothesis
    the best `beam` other candidates               -> the next live prefixes (caches reordered to match)

The first step runs one row per sentence (all beams would be the same start symbol) and the first reorder
expands the caches, so the encoder output and the cross-attention keys/values are computed once per
sentence, not once per beam. Later reorders move only the self-attention caches, and only their filled
positions, while no sentence finishes: every beam of a sentence shares its source-side state.

Scores are length-normalised log-probabilities, `log_prob / lp(len)`, where `len` counts the end symbol
when there is one:
    fairseq   lp = len ** lenpen                     (lenpen 0: raw log-prob; > 0 favours longer output)
    gnmt      lp = ((5 + len) / 6) ** lenpen         (Wu et al. 2016, https://arxiv.org/abs/1609.08144)

Stopping, one of STOPPING; either way a sentence is done at its maximum length, where live hypotheses are
finished without an end symbol:
    "finished"  once `beam` hypotheses have finished (fairseq, CTranslate2 with patience 1, Hugging Face's
                `early_stopping=True`): the rule most toolkits use, and the fewest steps; the default
    "best"      once it has `beam` finished hypotheses and no live one can beat the worst of them (log-probs
                only fall, so a live prefix's best final score is its score now normalised by the shortest
                or the longest length it can still reach): the best hypotheses the beam can find, at the
                cost of more steps
Beam 1 is exactly greedy under "finished"; under "best" only with lenpen 0 (with lenpen > 0 a live prefix
can overtake a shorter finished one). On the demo translator, Acts, beam 4: "finished" scored 16.47 BLEU
against 16.28 for "best" in three quarters of the time (docs/results.md).

B batch (sentences), K beam, N live sentences, t tokens generated so far, V vocabulary, d width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tformer.configio import shown
from tformer.decoding.beam_steps import EagerSteps, FixedSteps
from tformer.decoding.captured import bucket
from tformer.decoding.constraints import Repetition, force, forced_at
from tformer.decoding.decoder import Decoder, decoder_of
from tformer.decoding.steps import encode_source, eval_mode
from tformer.errors import UserError

LENPEN_KINDS = ("fairseq", "gnmt")
STOPPING = ("finished", "best")  # see the module docstring


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # without the start symbol and without the end symbol
    score: float  # log_prob / lp(len), what hypotheses are ranked by
    log_prob: float  # sum of the log-probabilities of the tokens (and of the end symbol, if any)
    eos: bool  # whether it ended with the end symbol (counted in len) or was cut at the maximum length


def length_penalty(length: int, *, lenpen: float, kind: str = "fairseq") -> float:
    """The divisor lp(len) of the log-probability; see the module docstring."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** lenpen
    return float(length) ** lenpen


MAX_LENPEN = 10.0  # lp = len ** lenpen stays a finite, non-zero float for any length below 1e30


def check_lenpen(lenpen: float, *, what: str = "lenpen") -> None:
    """The one check of a length penalty's exponent (a recipe's decode.lenpen, `--lenpen`, the server's): a
    number in [-MAX_LENPEN, MAX_LENPEN]. Beyond it lp overflows (lenpen 1000: OverflowError) or vanishes to 0
    (lenpen -1000: a division by zero) on ordinary lengths; the usual values are 0 to 2."""
    if not -MAX_LENPEN <= lenpen <= MAX_LENPEN:
        raise UserError(f"{what}={shown(lenpen)} must be in [-{MAX_LENPEN:g}, {MAX_LENPEN:g}] (0: the raw "
                        "log-probability; 1: per token; the usual values are 0 to 2)")


def check_beam(beam: int, *, what: str = "beam", vocab_size: int | None = None, most: int | None = None,
               limit: str = "") -> None:
    """The one check of a beam size (a recipe's decode.beam, `tformer translate --beam`, the server's beam):
    at least 1 (1 = greedy); fewer than the `vocab_size` tokens (beam search keeps that many different
    continuations); at most `most` where a caller bounds the cost, `limit` naming that bound. A ValueError
    naming it as `what` otherwise."""
    if beam < 1:
        raise UserError(f"{what}={beam} must be at least 1 (1 = greedy)")
    bounds = [(most, limit)] if most is not None else []
    if vocab_size is not None:
        bounds.append((vocab_size - 1, f"fewer than the vocabulary's {vocab_size} tokens"))
    if bounds:
        high, why = min(bounds, key=lambda bound: bound[0])
        if beam > high:
            raise UserError(f"{what}={shown(beam)} is not allowed; give 1 (greedy) to {high}" +
                            (f" ({why})" if why else ""))


def _check(*, beam: int, n_best: int, lenpen: float, lenpen_kind: str, stopping: str, vocab_size: int) -> None:
    if not isinstance(beam, int) or isinstance(beam, bool):
        raise UserError(f"beam={beam!r} must be a positive integer")
    check_beam(beam, vocab_size=vocab_size)
    check_lenpen(lenpen)
    if not isinstance(n_best, int) or not 1 <= n_best <= beam:
        raise UserError(f"n_best={n_best!r} must be an integer in [1, beam={beam}]")
    if lenpen_kind not in LENPEN_KINDS:
        raise UserError(f"lenpen_kind={lenpen_kind!r} is not allowed; choose one of {', '.join(LENPEN_KINDS)}")
    if stopping not in STOPPING:
        raise UserError(f"stopping={stopping!r} is not allowed; choose one of {', '.join(STOPPING)}")


def _keep_best(hyps: list[Hypothesis], new: Hypothesis, beam: int) -> None:
    """Add `new` to a sentence's finished hypotheses, keeping the best `beam`, best first."""
    hyps.append(new)
    hyps.sort(key=lambda h: h.score, reverse=True)
    del hyps[beam:]


def _candidates(scores: Tensor, log_probs: Tensor, *, beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """The best 2 * beam one-token extensions of each sentence's live prefixes. scores (N, k) log-probs of
    the prefixes, log_probs (N * k, V) of the next token -> their log-probs, the row each extends (an index
    into the N * k rows) and the token, each (N, 2K) best first."""
    n, k = scores.shape
    vocab = log_probs.shape[-1]
    total = (scores[:, :, None] + log_probs.view(n, k, vocab)).view(n, k * vocab)  # (N, k * V)
    cand_scores, cand = total.topk(min(2 * beam, k * vocab), dim=1)  # (N, 2K)
    rows = torch.arange(n, device=scores.device)[:, None] * k + cand // vocab  # (N, 2K)
    return cand_scores, rows, cand % vocab


def _live(cand_scores: Tensor, is_eos: Tensor, *, beam: int) -> Tensor:
    """(N, K) positions of the best `beam` candidates that are not the end symbol. There are enough: each
    prefix contributes at most one end symbol, and beam < V gives at least beam + 1 candidates."""
    rank = is_eos.long() * is_eos.shape[1] + torch.arange(is_eos.shape[1], device=is_eos.device)  # (N, 2K)
    return rank.topk(beam, dim=1, largest=False).indices


def _stay(rows: Tensor, k: int) -> Tensor:
    """(N, K) an order of each sentence's K new hypotheses that leaves as many as possible in their parent's
    place, so that fewer rows of the caches move (`KVCache.reorder`); rows (N, K) the parent of each, an index
    into the N * k old rows, k = K. A parent's first child takes its place; the other children take, in
    their order, the places whose old row has no child. On the demo translator (Acts, beam 4) this moves 22%
    of the rows where the ranked order moves 58%. The search does not depend on the order of a sentence's
    live hypotheses, save ties of exactly equal scores."""
    n, beam = rows.shape
    parent = rows - torch.arange(n, device=rows.device)[:, None] * k  # (N, K) in [0, K)
    earlier = torch.ones(beam, beam, dtype=torch.bool, device=rows.device).tril(-1)  # (K, K) c' < c
    first = ~((parent[:, :, None] == parent[:, None, :]) & earlier).any(dim=2)  # (N, K) a parent's first child
    place = torch.arange(beam, device=rows.device)  # (K,)
    taken = ((parent[:, :, None] == place) & first[:, :, None]).any(dim=1)  # (N, K) places a first child takes
    free = (taken.long() * beam + place).argsort(dim=1)  # (N, K): the free places first, in order
    rank = ((~first).long().cumsum(dim=1) - 1).clamp(min=0)  # (N, K) each later child's rank among them
    slot = torch.where(first, parent, free.gather(1, rank))  # (N, K) where each hypothesis goes
    return torch.empty_like(slot).scatter_(1, slot, place.expand(n, beam).contiguous())  # (N, K) who goes where


def decoder_steps(decoder: Decoder, memory: Tensor, src_valid: Tensor, *, beam: int, limits: list[int],
                  use_cache: bool) -> EagerSteps | FixedSteps:
    """The decoder's steps for one batch: dynamic, or fixed-shape (kept in the decoder's graphs) and started."""
    model, graphs = decoder.model, decoder.graphs
    if not decoder.fixed(use_cache=use_cache):
        return EagerSteps(model, memory, src_valid, slots=max(limits), use_cache=use_cache)
    rows, source = src_valid.shape
    slots = bucket(max(limits), cap=model.config.max_len)
    steps = graphs.get(("beam", rows, beam, source, slots),
                       lambda: FixedSteps(model, graphs, rows=rows, beam=beam, source=source, slots=slots))
    steps.start(memory, src_valid)
    return steps


@dataclass(frozen=True)
class _Ranking:
    """A call's settings for ranking hypotheses: their length-normalised scores, and whether a live prefix may
    still enter a sentence's best `beam`."""

    beam: int
    lenpen: float
    lenpen_kind: str
    stopping: str

    def normalise(self, log_prob: float, length: int) -> float:
        return log_prob / length_penalty(length, lenpen=self.lenpen, kind=self.lenpen_kind)

    def hypothesis(self, tokens: list[int], log_prob: Tensor, *, eos: bool) -> Hypothesis:
        total = float(log_prob)
        return Hypothesis(tokens=tokens, score=self.normalise(total, len(tokens) + eos), log_prob=total, eos=eos)

    def can_improve(self, hyps: list[Hypothesis], best_live: float, length: int, limit: int) -> bool:
        """Whether a live prefix (`length` tokens, log-prob `best_live`) may still enter the best `beam`.
        Its log-prob can only fall, so its best final score is at its shortest or longest final length."""
        if len(hyps) < self.beam:
            return best_live > float("-inf")
        if self.stopping == "finished":
            return False
        return max(self.normalise(best_live, length + 1), self.normalise(best_live, limit)) > hyps[-1].score


def _going_on(ranking: _Ranking, finished: list[list[Hypothesis]], sentence: Tensor, scores: Tensor, rows: Tensor,
              tokens: Tensor, prefix: Tensor, limits: list[int], step: int) -> Tensor:
    """(N',) the live sentences that go on after `step`: a sentence at its maximum length finishes its live
    hypotheses as they are (into `finished`); one goes on while a live prefix may still enter its best."""
    going = []
    for i, (s, best_live) in enumerate(zip(sentence.tolist(), scores.max(dim=1).values.tolist(), strict=True)):
        if limits[s] == step + 1:  # the maximum length: live hypotheses finish as they are
            for j in scores[i].isfinite().nonzero().flatten().tolist():
                hyp = ranking.hypothesis(prefix[rows[i, j]].tolist() + [int(tokens[i, j])], scores[i, j], eos=False)
                _keep_best(finished[s], hyp, ranking.beam)
        going.append(limits[s] > step + 1 and ranking.can_improve(finished[s], best_live, step + 1, limits[s]))
    return torch.tensor(going, device=scores.device).nonzero().flatten()


@torch.inference_mode()
def beam_search(model: nn.Module | Decoder, src: Tensor, *, beam: int = 4, lenpen: float = 1.0,
                lenpen_kind: str = "fairseq", max_len_a: float = 1.2, max_len_b: int = 10, n_best: int = 1,
                stopping: str = "finished", use_cache: bool = True, repetition: Repetition | None = None,
                prefixes: Sequence[Sequence[int]] | None = None) -> list[list[Hypothesis]]:
    """Beam-search translations of a padded batch `src` (B, S) (padding = config.pad_id).

    Returns, per sentence, its `n_best` hypotheses sorted by score, best first. `lenpen` and `lenpen_kind`
    set the length normalisation, `max_len_a` and `max_len_b` the maximum length int(a * n + b) for a source
    of n real tokens (as `greedy`); `stopping` when a sentence is done (STOPPING, the module docstring);
    `use_cache` decodes incrementally (same result, fewer FLOPs); `model`, `repetition` and `prefixes`: as
    `greedy`'s (a forced token's log-probability counts in the hypothesis's; a repetition penalty's changes
    count too, as the scores the search ranks). Captured (the `Decoder`'s choice): the decoder's step (caches'
    reorder included) is replayed as a CUDA graph, the search stays on the host (`beam_steps.FixedSteps`).
    One step of the search reads top to bottom as the algorithm goes: candidates, finished, live, prune,
    reorder."""
    decoder = decoder_of(model)
    model = decoder.model
    config = model.config
    _check(beam=beam, n_best=n_best, lenpen=lenpen, lenpen_kind=lenpen_kind, stopping=stopping,
           vocab_size=config.vocab_size)
    ranking = _Ranking(beam, lenpen, lenpen_kind, stopping)
    with eval_mode(model, rows=src.shape[0] * beam, layout=decoder.layout):
        src_valid, memory, limits, forced = encode_source(model, src, max_len_a=max_len_a, max_len_b=max_len_b,
                                                          prefixes=prefixes)  # (B, S), (B, S, d)
        steps = decoder_steps(decoder, memory, src_valid, beam=beam, limits=limits, use_cache=use_cache)
        device = memory.device
        sentence = torch.arange(src.shape[0], device=device)  # (N,) live sentences
        scores = torch.zeros(src.shape[0], 1, device=device)  # (N, k) log-prob of each live prefix; k = 1 first
        prefix = torch.empty(src.shape[0], 0, dtype=torch.long, device=device)  # (N * k, t)
        finished: list[list[Hypothesis]] = [[] for _ in limits]
        for step in range(max(limits)):
            k = scores.shape[1]  # rows of each live sentence: 1 at the first step, then `beam`
            log_probs = steps.log_probs(prefix, sentence, k)  # (N * k, V)
            own = log_probs
            if repetition is not None:
                log_probs = repetition.apply(log_probs, prefix)
            row_sentence = sentence.repeat_interleave(k)  # (N * k,)
            log_probs = force(log_probs, forced_at(forced, row_sentence, step), own)
            cand_scores, cand_rows, cand_tokens = _candidates(scores, log_probs, beam=beam)  # (N, 2K)
            is_eos = cand_tokens == config.eos_id

            # End-symbol candidates among the best `beam` are finished hypotheses ...
            for i, j in (is_eos[:, :beam] & cand_scores[:, :beam].isfinite()).nonzero().tolist():
                hyp = ranking.hypothesis(prefix[cand_rows[i, j]].tolist(), cand_scores[i, j], eos=True)
                _keep_best(finished[int(sentence[i])], hyp, beam)

            # ... and the best `beam` others live on, in the sentences that go on.
            pick = _live(cand_scores, is_eos, beam=beam)  # (N, K)
            if k == beam:  # each hypothesis where its parent was, when it can (the caches move less)
                pick = pick.gather(1, _stay(cand_rows.gather(1, pick), k))
            scores, rows, tokens = (x.gather(1, pick) for x in (cand_scores, cand_rows, cand_tokens))  # (N, K)
            keep = _going_on(ranking, finished, sentence, scores, rows, tokens, prefix, limits, step)  # (N',)
            if keep.numel() == 0:
                break
            was = sentence
            sentence, scores = sentence[keep], scores[keep]
            index, tokens = rows[keep].flatten(), tokens[keep].flatten()  # (N' * K,)
            prefix = steps.move(index, tokens, prefix, was=was, k=k, now=sentence)  # (N' * K, t + 1)
        return [hyps[:n_best] for hyps in finished]
