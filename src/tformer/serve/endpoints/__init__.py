"""The server's POST endpoints, one module each, and what takes all of them: a checkpoint loaded with those it
serves (`load_service`) and a batch run by its works' endpoint (`run_batch`).

    translate.py   encoder-decoder: texts -> translations (n-best lists, prefixes)
    generate.py    GPT: a prompt -> its continuation, whole or streamed
    score.py       GPT: texts -> log-likelihood, perplexity, bits, each token's log-probability
    classify.py    BERT classifier: texts -> labels with their probabilities
    attention.py   any model with exact attention: a text -> every layer's and head's weights

Each module holds all of its endpoint: its JSON body (`serve.requests.Body`), its work (a frozen dataclass
with `size` and `batch_key()`), `prepare(service, **fields) -> Job` (the request checked, before it waits for
the model), `run(loaded, works)` (a batch of works answered in order, one library call for them all), how its
answer is shaped (`respond`), and its `ENDPOINT` record (`service.Endpoint`: the checkpoint kinds that serve
it, and what it reads at load or adds to /info). `ENDPOINTS` lists the records; the app makes a route of each,
in this order. Adding an endpoint is its module, its line here, and the page (`serve/static/app.js`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tformer.decoding.speculative import DRAFT_TOKENS
from tformer.inference import Loaded, load, load_draft
from tformer.serve.endpoints import attention, classify, generate, score, translate
from tformer.serve.limits import Limits
from tformer.serve.service import Endpoint, Service

ENDPOINTS: tuple[Endpoint, ...] = (translate.ENDPOINT, generate.ENDPOINT, score.ENDPOINT, classify.ENDPOINT,
                                   attention.ENDPOINT)


def load_service(path: str | Path, *, limits: Limits, device: str = "auto", dtype: str = "float32",
                 quantization: str | None = None, draft: str | Path | None = None,
                 draft_tokens: int = DRAFT_TOKENS) -> Service:
    """The checkpoint at `path` (any kind `inference.load` reads: trained here or imported from Hugging
    Face), on `device` in `dtype`, ready to serve; `quantization` ("int8") quantizes it at load, on the CPU.
    It serves each endpoint whose kinds hold its kind and that does not refuse it, and each of those reads
    what it needs now (`Endpoint.setup`). `draft`: a GPT's draft checkpoint (`inference.load_draft`), held
    by the loaded model, proposing `draft_tokens` tokens a round where /generate decodes speculatively."""
    loaded = load(path, device=device, dtype=dtype, quantization=quantization)
    if draft is not None:
        loaded.draft = load_draft(draft, loaded, tokens=draft_tokens)
    served, refused = [], {}
    for endpoint in (e for e in ENDPOINTS if loaded.kind in e.kinds):
        why = endpoint.refuses(loaded) if endpoint.refuses is not None else None
        if why is None:
            served.append(endpoint)
        else:
            refused[endpoint.name] = why
    state = {e.name: e.setup(loaded, limits) for e in served if e.setup is not None}
    return Service(loaded=loaded, limits=limits, served=tuple(served), state=state, refused=refused)


def run_batch(loaded: Loaded, works: list[Any]) -> list[Any]:
    """The answers to the works of one batch key (so of one endpoint), in order: one library call for them all."""
    (endpoint,) = (e for e in ENDPOINTS if isinstance(works[0], e.work))
    return endpoint.run(loaded, works)


__all__ = ["ENDPOINTS", "attention", "classify", "generate", "load_service", "run_batch", "score", "translate"]
