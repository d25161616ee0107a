"""What each endpoint asks the model to do, and doing it: one frozen dataclass per endpoint's work
(`TranslateWork`, `GenerateWork`, `ScoreWork`, `ClassifyWork`, `AttentionWork`), the `batching.Job` that
carries it, and `run_batch`, which decodes works of one batch key with one call of the library.

A work's `size` is the sentences it adds to a batch, and its `batch_key()` what works must share to be
decoded together (a translation's `decoding.DecodeConfig`, a generation's `decoding.SampleConfig`, each as
its `search_key()`; any scorings, any classifications). A translation carries its sentences' ids,
tokenized once when the request was checked. Seeded sampling and attention maps have no key, so they always
run alone: a seeded draw in a batch would take other rows' random numbers, and recording attention switches
the model to its eager kernel. Batched decoding gives each sentence what it gives the sentence alone (padding
is masked; the library's tests hold `translate`, `generate`, scoring and classification to that), so
batching changes when an answer comes, not what it is.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tformer.decoding.search import sample
from tformer.decoding.settings import DecodeConfig, SampleConfig
from tformer.inference import (
    Encoded,
    Loaded,
    TextStream,
    n_best_ids,
    score_lines,
    token_scores,
    top_labels,
    translate_ids,
)
from tformer.serve.batching import Job

# --- the work of each endpoint ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslateWork:
    """Sentences to translate, as ids (`ids`; `forced`: per sentence, the ids its translation must start with,
    () when no sentence has a prefix), and how: `settings`; `n_best`, how many hypotheses to answer with their
    scores (None: the best one's text only). Neither the prefixes nor n_best change how a search runs, so
    neither is part of the batch key."""

    ids: tuple[tuple[int, ...], ...]
    settings: DecodeConfig
    forced: tuple[tuple[int, ...], ...] = ()
    n_best: int | None = None
    warnings: tuple[str, ...] = ()  # what the answer says of its input (`service.warnings`)

    @property
    def size(self) -> int:
        return len(self.ids)

    def batch_key(self) -> DecodeConfig:
        return self.settings.search_key()


@dataclass(frozen=True)
class GenerateWork:
    """One prompt to continue: its ids, how many tokens it may get, where its text goes as it comes, and how
    it samples."""

    ids: tuple[int, ...]
    max_new: int  # at most: the request's max_new_tokens, or what the context leaves
    emit: Callable[[str], None] | None
    settings: SampleConfig
    warnings: tuple[str, ...] = ()
    size: ClassVar[int] = 1

    def batch_key(self) -> SampleConfig | None:
        return self.settings.search_key()


@dataclass(frozen=True)
class ScoreWork:
    """Texts to score; `per_token` only shapes the answer, so any scorings share a batch."""

    texts: tuple[str, ...]
    per_token: bool
    warnings: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.texts)

    def batch_key(self) -> type:
        return ScoreWork


@dataclass(frozen=True)
class ClassifyWork:
    """Texts to classify; `top` only shapes the answer, so any classifications share a batch."""

    texts: tuple[str, ...]
    top: int
    warnings: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.texts)

    def batch_key(self) -> type:
        return ClassifyWork


@dataclass(frozen=True)
class AttentionWork:
    """A text (and an encoder-decoder's target) whose attention weights to record: always alone."""

    text: str
    target: str | None
    size: ClassVar[int] = 1

    def batch_key(self) -> None:
        return None


Work = TranslateWork | GenerateWork | ScoreWork | ClassifyWork | AttentionWork


def job(work: Work) -> Job:
    """`work` as the batcher queues it: with its batch key and size."""
    return Job(key=work.batch_key(), size=work.size, work=work)


# --- running batches ------------------------------------------------------------------------------------


def run_batch(loaded: Loaded, works: list[Work]) -> list[Any]:
    """The answers to the works of one batch key (so of one type), in order: one library call for them all."""
    runners = {TranslateWork: _translate, GenerateWork: _generate, ScoreWork: _score, ClassifyWork: _classify,
               AttentionWork: _attention}
    return runners[type(works[0])](loaded, works)


def _flat(texts: list[Sequence[str]]) -> tuple[list[str], list[int]]:
    """All the texts of a batch's requests in one list, and where each request's texts start."""
    starts = list(itertools.accumulate([0, *map(len, texts)]))
    return [t for request in texts for t in request], starts


def _translate(loaded: Loaded, works: list[TranslateWork]) -> list[list[str] | list[list[dict[str, Any]]]]:
    """Each work's translations (list[str]), or for a work with n_best its sentences' hypotheses (text, score,
    log_prob, eos). The works that ask for hypotheses are decoded in one call of `translate_n_best` (as many
    as the most any asks for, each cut to its own), the others in one of `translate`: each gets the answer it
    would get alone."""
    out: list[Any] = [None] * len(works)
    for scored in (False, True):
        group = [i for i, w in enumerate(works) if (w.n_best is not None) == scored]
        if group:
            for i, answer in zip(group, _translate_group(loaded, [works[i] for i in group], scored), strict=True):
                out[i] = answer
    return out


def _translate_group(loaded: Loaded, works: list[TranslateWork], scored: bool) -> list[Any]:
    decode = dataclasses.replace(works[0].settings, batch_size=sum(w.size for w in works))  # one call for all
    ids, starts = _flat([[list(x) for x in w.ids] for w in works])
    forced = None
    if any(w.forced for w in works):
        forced, _ = _flat([[list(x) for x in w.forced] if w.forced else [[]] * w.size for w in works])
    encoded = Encoded(ids, forced)
    if not scored:
        out = translate_ids(loaded.decoder, loaded.tokenizer, encoded, decode)
        return [out[a:b] for a, b in itertools.pairwise(starts)]
    found = n_best_ids(loaded.decoder, loaded.tokenizer, encoded, decode, n_best=max(w.n_best for w in works))
    return [[[dataclasses.asdict(c) for c in hyps[: w.n_best]] for hyps in found[a:b]]
            for w, (a, b) in zip(works, itertools.pairwise(starts), strict=True)]


def _generate(loaded: Loaded, works: list[GenerateWork]) -> list[dict[str, Any]]:
    """Continue every prompt of the batch in `decoding.generate` calls: as few as the context allows (the
    longest prompt plus the most new tokens of a call must fit max_len; a row's own positions start at its
    first token, so each row gets what it would get alone), each row cut at its own max_new."""

    streams = [TextStream(loaded.tokenizer) for _ in works]
    for group in _fitting(works, loaded.config.max_len):
        _generate_rows(loaded, [works[i] for i in group], [streams[i] for i in group])
    return [{"text": s.text, "tokens": len(s.ids), "finish": "length" if len(s.ids) == g.max_new else "stop"}
            for g, s in zip(works, streams, strict=True)]


def _fitting(rows: list[GenerateWork], max_len: int) -> list[list[int]]:
    """The rows' indices in groups, in order, each group's longest prompt + most new tokens <= max_len."""
    groups: list[list[int]] = []
    longest = most = 0
    for i, g in enumerate(rows):
        if groups and max(longest, len(g.ids)) + max(most, g.max_new) <= max_len:
            groups[-1].append(i)
            longest, most = max(longest, len(g.ids)), max(most, g.max_new)
        else:
            groups.append([i])
            longest, most = len(g.ids), g.max_new
    return groups


def _generate_rows(loaded: Loaded, rows: list[GenerateWork], streams: list[Any]) -> None:

    def on_token(row: int, token: int) -> None:
        if len(streams[row].ids) < rows[row].max_new:  # a row stops at its own limit, the call at the largest
            piece = streams[row].push(token)
            if piece and rows[row].emit is not None:
                rows[row].emit(piece)

    most = max(g.max_new for g in rows)
    if most > 0:  # the rows' settings: equal (the batch key), but for what the key leaves out of a greedy search
        sample(loaded.decoder, [list(g.ids) for g in rows], rows[0].settings, max_new_tokens=most,
               eos_id=loaded.config.eos_id, pad_id=loaded.config.pad_id or 0, on_token=on_token)


def _score(loaded: Loaded, works: list[ScoreWork]) -> list[list[dict[str, Any]]]:

    texts, starts = _flat([w.texts for w in works])
    scores = score_lines(loaded.model, loaded.tokenizer, texts)
    out = []
    for work, (a, b) in zip(works, itertools.pairwise(starts), strict=True):
        answer = []
        for text, s in zip(texts[a:b], scores[a:b], strict=True):
            item = {"log_prob": s.log_prob, "tokens": s.n_tokens, "perplexity": _finite(s.perplexity),
                    "bits_per_token": -s.log_prob / math.log(2) / s.n_tokens, "bits_per_char": s.bits_per_char}
            if work.per_token:
                item["token_log_probs"] = [[t, lp] for t, lp in token_scores(loaded.tokenizer, text, s)]
            answer.append(item)
        out.append(answer)
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _classify(loaded: Loaded, works: list[ClassifyWork]) -> list[list[list[dict]]]:

    texts, starts = _flat([w.texts for w in works])
    labels = top_labels(loaded.model, loaded.tokenizer, texts, top=loaded.config.n_labels)
    return [[[{"label": name, "probability": p} for name, p in ranked[:w.top]] for ranked in labels[a:b]]
            for w, (a, b) in zip(works, itertools.pairwise(starts), strict=True)]


def _attention(loaded: Loaded, works: list[AttentionWork]) -> list[dict[str, Any]]:
    """The library's maps (`viz.attention.attention_maps`), their float32 weights sent unrounded: each float32
    is a float64 that JSON carries exactly, so each row sums to 1 as the library's does (rounded to a few
    decimals, a row's sum would drift by up to half a unit of the last decimal per key)."""
    from tformer.viz.attention import attention_maps

    out = []
    for w in works:
        maps = attention_maps(loaded.model, loaded.tokenizer, w.text, target=w.target)
        out.append({"maps": [{"part": m.part, "title": m.title, "queries": m.queries, "keys": m.keys,
                              "weights": m.weights.tolist()} for m in maps]})
    return out


__all__ = ["AttentionWork", "ClassifyWork", "GenerateWork", "ScoreWork", "TranslateWork", "Work", "job", "run_batch"]
