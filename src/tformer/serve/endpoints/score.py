"""POST /score (a GPT): {"text"} or {"texts"} -> {"score"} or {"scores"}: each text's log-likelihood,
perplexity, bits per token and per character, and (unless "per_token" is false) each token's log-probability.

`per_token` only shapes the answer, so any scorings share a batch; but each text of the batch is scored
alone (`inference.score_lines` of that text only), so its numbers are bit for bit those of the text sent by
itself, whatever else the batch holds. Scored together, the texts would be padded to the longest, and a
longer row (and a larger batch) changes how the matrix products and the softmax split their sums, which moves
a score in its 7th or 8th significant digit. A text alone is also padding-free, so nothing is computed for
padding.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from tformer.inference import Loaded, score_lines, token_scores
from tformer.serve.batching import Job
from tformer.serve.errors import InputError
from tformer.serve.requests import Body
from tformer.serve.service import Endpoint, Service, Submit, flat, job, texts_of, warned, warnings


class ScoreBody(Body):
    example = '{"text": "In the beginning"}'
    text: str | None = None
    texts: list[str] | None = None
    per_token: bool = True  # also each token's log p(x_t | x_<t)


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


def prepare(service: Service, *, text: str | None, texts: list[str] | None, per_token: bool = True) -> Job:
    """A /score request's work: its texts, each checked against the context less the start token (or, where
    the model has none, at least 2 tokens: the first is context only)."""
    named = texts_of(text, texts, service.limits)
    bos = service.config.bos_id
    ids, unknown = service.encode(named, room=0 if bos is None else 1,
                                  what="" if bos is None else ", less its start token")
    for (name, _), x in zip(named, ids, strict=True):
        if bos is None and len(x) < 2:
            raise InputError(f"{name} is {len(x)} token(s); this model has no start token, so its first token "
                             "is context only: give at least 2")
    return job(ScoreWork(tuple(t for _, t in named), per_token, warnings=warnings(unknown)))


def run(loaded: Loaded, works: list[ScoreWork]) -> list[list[dict[str, Any]]]:
    """Each work's scores, each text scored alone (see the module's notes)."""
    texts, starts = flat([w.texts for w in works])
    scores = [score_lines(loaded.model, loaded.tokenizer, [text])[0] for text in texts]
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


async def respond(service: Service, body: Any, submit: Submit) -> dict[str, Any]:
    """{"score"} for a text, {"scores"} for texts."""
    queued = prepare(service, text=body.text, texts=body.texts, per_token=body.per_token)
    out = await submit(queued)
    return {**({"score": out[0]} if body.texts is None else {"scores": out}), **warned(queued.work)}


ENDPOINT = Endpoint(name="score", kinds=("gpt",), body=ScoreBody, work=ScoreWork, run=run, respond=respond)

__all__ = ["ENDPOINT", "ScoreBody", "ScoreWork", "prepare", "run"]
