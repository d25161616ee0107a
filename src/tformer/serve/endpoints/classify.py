"""POST /classify (a BERT classifier): {"text"} or {"texts"} -> {"classification"} or {"classifications"}:
the "top" labels of each text with their probabilities, most likely first. /info names the labels.

`top` only shapes the answer, so any classifications share a batch, classified in one call of
`inference.top_labels`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from tformer.inference import Loaded, check_top, label_names, top_labels
from tformer.serve.batching import Job
from tformer.serve.requests import Body
from tformer.serve.service import Endpoint, Service, Submit, flat, job, texts_of, warned, warnings


class ClassifyBody(Body):
    example = '{"text": "a fine film"}'
    text: str | None = None
    texts: list[str] | None = None
    top: int = 1  # labels returned per text, most likely first


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


def info(service: Service) -> dict[str, Any]:
    """/info's "labels": the classifier's label names, by id."""
    return {"labels": label_names(service.config)}


def prepare(service: Service, *, text: str | None, texts: list[str] | None, top: int = 1) -> Job:
    """A /classify request's work: its texts, each checked against the context less [CLS] and [SEP]."""
    named = texts_of(text, texts, service.limits)
    check_top(top)
    _, unknown = service.encode(named, room=2, what=", less 2 for [CLS] and [SEP]")
    return job(ClassifyWork(tuple(t for _, t in named), top, warnings=warnings(unknown)))


def run(loaded: Loaded, works: list[ClassifyWork]) -> list[list[list[dict]]]:
    """Each work's texts' labels, every text of the batch classified in one call."""
    texts, starts = flat([w.texts for w in works])
    labels = top_labels(loaded.model, loaded.tokenizer, texts, top=loaded.config.n_labels)
    return [[[{"label": name, "probability": p} for name, p in ranked[:w.top]] for ranked in labels[a:b]]
            for w, (a, b) in zip(works, itertools.pairwise(starts), strict=True)]


async def respond(service: Service, body: Any, submit: Submit) -> dict[str, Any]:
    """{"classification"} for a text, {"classifications"} for texts."""
    queued = prepare(service, text=body.text, texts=body.texts, top=body.top)
    out = await submit(queued)
    return {**({"classification": out[0]} if body.texts is None else {"classifications": out}), **warned(queued.work)}


ENDPOINT = Endpoint(name="classify", kinds=("bert classifier",), body=ClassifyBody, work=ClassifyWork, run=run,
                    respond=respond, info=info)

__all__ = ["ENDPOINT", "ClassifyBody", "ClassifyWork", "prepare", "run"]
