"""The endpoints are one registry (`serve.endpoints.ENDPOINTS`): each record says which checkpoint kinds
serve it, and an endpoint added to it is served (its route, its place in /info and in the 404 messages, its
batches) with no other change to the server."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest
from serving import call, start

from tformer.inference import Loaded
from tformer.serve import endpoints
from tformer.serve.batching import Job
from tformer.serve.endpoints import ENDPOINTS
from tformer.serve.requests import Body
from tformer.serve.service import KINDS, Endpoint, Service, Submit, flat, job, texts_of


def test_each_kind_serves_the_endpoints_whose_records_name_it() -> None:
    served = {kind: [e.name for e in ENDPOINTS if kind in e.kinds] for kind in KINDS}
    assert served == {"seq2seq": ["translate", "attention"], "gpt": ["generate", "score", "attention"],
                      "bert classifier": ["classify", "attention"], "bert": ["attention"]}
    assert len({e.name for e in ENDPOINTS}) == len({e.work for e in ENDPOINTS}) == len(ENDPOINTS)


class LengthBody(Body):
    example = '{"texts": ["a"]}'
    texts: list[str]


@dataclasses.dataclass(frozen=True)
class LengthWork:
    texts: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.texts)

    def batch_key(self) -> type:
        return LengthWork


def run(loaded: Loaded, works: list[LengthWork]) -> list[list[int]]:
    texts, starts = flat([w.texts for w in works])
    ids = loaded.tokenizer.encode_batch(texts)
    return [[len(x) for x in ids[a:b]] for a, b in itertools.pairwise(starts)]


async def respond(service: Service, body: Any, submit: Submit) -> dict[str, Any]:
    queued: Job = job(LengthWork(tuple(t for _, t in texts_of(None, body.texts, service.limits))))
    return {"tokens": await submit(queued)}


LENGTH = Endpoint(name="length", kinds=("gpt",), body=LengthBody, work=LengthWork, run=run, respond=respond,
                  info=lambda service: {"length": "tokens per text"})


def test_an_endpoint_added_to_the_registry_is_served(checkpoints: dict[str, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoints, "ENDPOINTS", (*ENDPOINTS, LENGTH))
    monkeypatch.setattr("tformer.serve.app.ENDPOINTS", (*ENDPOINTS, LENGTH))
    with start(checkpoints["gpt"]) as url:
        status, info = call(url, "GET", "/info")
        assert status == 200 and info["endpoints"] == ["generate", "score", "attention", "length"]
        assert info["length"] == "tokens per text"
        assert call(url, "POST", "/length", {"texts": ["the cat", "a"]}) == (200, {"tokens": [7, 1]})  # characters
        assert call(url, "POST", "/length", {"text": "a"}) == \
            (422, {"error": 'missing field \'texts\'; /length takes texts, e.g. {"texts": ["a"]}'})  # its example
        assert call(url, "GET", "/length")[1]["error"] == "GET /length is not allowed; use POST /length"
    with start(checkpoints["seq2seq"]) as url:
        status, answer = call(url, "POST", "/length", {"texts": ["a"]})
        assert (status, answer["error"]) == (404, "/length is not served for this seq2seq checkpoint; its endpoints: "
                                                  "/translate, /attention (and GET /health, /info)")
