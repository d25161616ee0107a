"""POST /attention (any model whose attention is exact): {"text"} -> {"maps"}: every layer's and head's
attention weights (`viz.attention.attention_maps`); an encoder-decoder's "target" is the translation to align
(default: its greedy one). A target may be as long as any translation the model makes (its max_len tokens,
where /translate cuts one), so every answer of /translate can be sent back here.

Recording attention switches the model to its eager kernel, so a map's work has no batch key: it runs alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tformer.errors import UserError
from tformer.inference import Loaded
from tformer.serve.batching import Job
from tformer.serve.errors import InputError
from tformer.serve.requests import Body
from tformer.serve.service import KINDS, Endpoint, Service, Submit, check_text, check_tokens, job


class AttentionBody(Body):
    example = '{"text": "In the beginning"}'
    text: str
    target: str | None = None  # encoder-decoder: the target to align (default: its greedy translation)


@dataclass(frozen=True)
class AttentionWork:
    """A text (and an encoder-decoder's target) whose attention weights to record: always alone."""

    text: str
    target: str | None
    size: ClassVar[int] = 1

    def batch_key(self) -> None:
        return None


def refuses(loaded: Loaded) -> str | None:
    """Why `loaded`'s model has no attention maps to draw (`viz.attention.check_exact`'s words: attention that
    is not exact, or an RNN without attention), or None when every attention layer has a weight matrix."""
    from tformer.viz.attention import check_exact

    try:
        check_exact(loaded.model)
    except UserError as e:
        return str(e)
    return None


def prepare(service: Service, *, text: str, target: str | None = None) -> Job:
    """An /attention request's work: its text (and target), each checked against the context less the
    tokens the model adds around it."""
    limits = service.limits
    text = check_text(text, "text", limits)
    if target is not None:
        if service.kind != "seq2seq":
            raise InputError(f"target is only for an encoder-decoder; this is a {service.kind} checkpoint")
        target = check_text(target, "target", limits)
        n, most = len(service.tokenizer.encode(target)), service.config.max_len
        if n > most:  # as long as a translation may be, whatever --max-tokens says of the texts sent
            raise InputError(f"target is {n} tokens; a target may have at most {most}, as many as a translation "
                             f"(the model's context max_len={most})")
    room = KINDS[service.kind].room_of(service.config)
    check_tokens(len(service.tokenizer.encode(text)), service.text_limit(room=room), "text", service)
    return job(AttentionWork(text, target))


def run(loaded: Loaded, works: list[AttentionWork]) -> list[dict[str, Any]]:
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


async def respond(service: Service, body: Any, submit: Submit) -> dict[str, Any]:
    """{"maps": [...]}."""
    return await submit(prepare(service, text=body.text, target=body.target))


ENDPOINT = Endpoint(name="attention", kinds=tuple(KINDS), body=AttentionBody, work=AttentionWork, run=run,
                    respond=respond, refuses=refuses)

__all__ = ["ENDPOINT", "AttentionBody", "AttentionWork", "prepare", "run"]
