"""The model a server holds (`Service`), what an endpoint is (`Endpoint`), and the checks and helpers every
endpoint shares: a request's texts (`texts_of`, `check_text`, `check_tokens`), its warnings, the job it
becomes (`job`) and a batch's texts in one list (`flat`).

Each endpoint lives in its own module under `serve.endpoints`, which imports this one; `serve.endpoints`
lists them and loads a checkpoint with those it serves (`endpoints.load_service`). Nothing here names an
endpoint: what one serves, reads at load or adds to /info is its own module's (its `Endpoint` record).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from torch import nn

from tformer.config import ModelConfig, RNNSeq2SeqConfig, family_of
from tformer.data.lines import normalise_text
from tformer.inference import Loaded
from tformer.inference.unknown import Unknown, encode_counted
from tformer.quant import Int8Linear
from tformer.serve.batching import Job
from tformer.serve.errors import InputError
from tformer.serve.limits import Limits

if TYPE_CHECKING:  # a body's pydantic model: the `serve` extra, which this module does not need
    from tformer.serve.requests import Body


@dataclass(frozen=True)
class Kind:
    """The tokens a kind of checkpoint adds around a text (`room`: [CLS] and [SEP] for BERT; `start`: one more
    where the model has a start token, as a GPT's document starts after it)."""

    room: int = 0
    start: bool = False

    def room_of(self, config: ModelConfig) -> int:
        return self.room + (1 if self.start and config.bos_id is not None else 0)


KINDS = {"seq2seq": Kind(), "gpt": Kind(start=True), "bert classifier": Kind(room=2), "bert": Kind(room=2)}


class Work(Protocol):
    """What a prepared request asks the model to do (one frozen dataclass per endpoint): the sentences it adds
    to a batch (`size`) and what works must share to be decoded together (`batch_key()`; None: it runs alone)."""

    @property
    def size(self) -> int: ...

    def batch_key(self) -> Any: ...


Submit = Callable[[Job], Awaitable[Any]]  # a job to the micro-batcher, its answer when its batch has run


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """One POST endpoint, everything the server needs of it: its path's name, the checkpoint kinds that serve
    it (`refuses`: why a model of those kinds cannot, or None), its JSON body, its work's type and the batch
    runner that answers a list of them in order (`run`), and `respond`, which turns a body into the answer's
    JSON (checking it, submitting its job, shaping what comes back). `setup` reads what it needs once at load
    (kept in `Service.state` under its name); `info` adds to /info. `steps`: the batch that decodes its works
    a token at a time for continuous batching (`scheduler.Stepped`; None from it: not for this model), or
    None: its works are micro-batched."""

    name: str
    kinds: tuple[str, ...]
    body: type[Body]
    work: type
    run: Callable[[Loaded, list[Any]], list[Any]]
    respond: Callable[[Service, Any, Submit], Awaitable[Any]]
    refuses: Callable[[Loaded], str | None] | None = None
    setup: Callable[[Loaded, Limits], Any] | None = None
    info: Callable[[Service], dict[str, Any]] | None = None
    steps: Callable[[Loaded, Limits], Any] | None = None


@dataclass
class Service:
    """A loaded checkpoint (`inference.Loaded`: model, config, tokenizer, kind, decoding layout), its limits, the
    endpoints it serves (`served`, in the registry's order) and what they read at load (`state`), and why it
    does not serve one its kind has (`refused`: attention that is not exact)."""

    loaded: Loaded
    limits: Limits
    served: tuple[Endpoint, ...] = ()
    state: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> nn.Module:
        return self.loaded.model

    @property
    def config(self) -> ModelConfig:
        return self.loaded.config

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def kind(self) -> str:
        return self.loaded.kind

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.served)

    def text_limit(self, room: int = 0) -> int:
        """Tokens one text may have: the server's --max-tokens, at most the model's context less `room`."""
        context = self.config.max_len - room
        return context if self.limits.max_tokens is None else min(self.limits.max_tokens, context)

    def info(self) -> dict[str, Any]:
        """The model's family and sizes, the endpoints it serves (with what each adds) and the server's limits."""
        c = self.config
        sizes = {name: getattr(c, name) for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len")
                 if hasattr(c, name)}  # an RNN encoder-decoder has no heads and no feed-forward
        if getattr(c, "n_decoder_layers", None) is not None:
            sizes["n_decoder_layers"] = c.n_decoder_layers
        packed = sum(m.numel() for m in self.model.modules() if isinstance(m, Int8Linear))  # int8 layers
        sizes["parameters"] = sum(p.numel() for p in self.model.parameters()) + packed
        extra: dict[str, Any] = {}
        for endpoint in self.served:
            extra |= endpoint.info(self) if endpoint.info is not None else {}
        mixer = c.match if isinstance(c, RNNSeq2SeqConfig) else c.attention.kind  # an RNN's MATCH, else the kind
        if self.loaded.draft is not None:  # /generate's draft model (speculative decoding)
            extra["draft"] = {"checkpoint": self.loaded.draft.path, "draft_tokens": self.loaded.draft.tokens}
        return {"checkpoint": self.loaded.path, "family": family_of(c), "kind": self.kind,
                "model": type(self.model).__name__, "attention": mixer,
                "device": str(next(self.model.parameters()).device), "dtype": self.loaded.dtype,
                "quantization": self.loaded.quantization,
                "sizes": sizes, "endpoints": list(self.endpoints), "limits": dataclasses.asdict(self.limits), **extra}

    def encode(self, named: Sequence[tuple[str, str]], *, room: int = 0, what: str = "") -> tuple[list[list[int]],
                                                                                                  Unknown]:
        """The ids of each (name, text), encoded once and checked against the server's limit less `room`
        (`check_tokens`), and what in them the tokenizer could not represent (`inference.unknown`)."""
        ids, unknown = encode_counted(self.tokenizer, [t for _, t in named])
        limit = self.text_limit(room)
        for (name, _), x in zip(named, ids, strict=True):
            check_tokens(len(x), limit, name, self, what=what)
        return ids, unknown

    def need(self, endpoint: str) -> None:
        """An InputError (404) unless this model serves `endpoint`."""
        if endpoint not in self.endpoints:
            offered = ", ".join(f"/{e}" for e in self.endpoints) or "none"
            why = f" ({self.refused[endpoint]})" if endpoint in self.refused else ""
            raise InputError(f"/{endpoint} is not served for this {self.kind} checkpoint{why}; its endpoints: "
                             f"{offered} (and GET /health, /info)", status=404)


# --- checking requests -----------------------------------------------------------------------------------


def texts_of(text: str | None, texts: list[str] | None, limits: Limits) -> list[tuple[str, str]]:
    """(name, text) of a request's `text` or `texts` (exactly one of them), each checked by `check_text`."""
    if (text is None) == (texts is None):
        raise InputError("give either text (one string) or texts (a list of strings), not " +
                         ("both" if text is not None else "neither"))
    if text is not None:
        return [("text", check_text(text, "text", limits))]
    if not texts:
        raise InputError("texts is empty; give at least one string")
    if len(texts) > limits.max_batch:
        raise InputError(f"texts has {len(texts)} strings; this server takes at most {limits.max_batch} in one "
                         "request (--max-batch)")
    return [(f"texts[{i}]", check_text(t, f"texts[{i}]", limits)) for i, t in enumerate(texts)]


def check_text(text: str, name: str, limits: Limits, *, empty: bool = False) -> str:
    """`text` without a leading byte-order mark (`data.lines.normalise_text`, as the command line reads a line),
    unless that is empty or only whitespace (unless `empty`), longer than --max-chars, or not valid Unicode (a
    lone surrogate, which JSON's \\ud800 escapes can carry and no tokenizer can encode)."""
    given, text = text, normalise_text(text)
    if not empty and not text.strip():
        what = "only whitespace" if text else "empty after its byte-order mark" if given else "empty"
        raise InputError(f"{name} is {what}; give some text")
    if len(text) > limits.max_chars:
        raise InputError(f"{name} has {len(text)} characters; this server takes at most {limits.max_chars} "
                         "(--max-chars)")
    bad = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:
        raise InputError(f"{name} is not valid Unicode: a lone surrogate {ascii(text[bad])} at character {bad + 1}")
    return text


def check_tokens(n: int, limit: int, name: str, service: Service, *, what: str = "") -> None:
    if n > limit:
        context = f"the model's context max_len={service.config.max_len}{what}"
        raise InputError(f"{name} is {n} tokens; this server takes at most {limit} ({context}, --max-tokens)")


# --- a request's work and its answer ---------------------------------------------------------------------


def job(work: Work) -> Job:
    """`work` as the batcher queues it: with its batch key and size."""
    return Job(key=work.batch_key(), size=work.size, work=work)


def warnings(unknown: Unknown) -> tuple[str, ...]:
    """An answer's "warnings": the one line saying what of its input the model's tokenizer cannot represent
    (`inference.Unknown.warning`, as the command line warns on stderr), or none."""
    line = unknown.warning()
    return (line,) if line else ()


def warned(work: Any) -> dict[str, Any]:
    """What an answer adds for its work's warnings: {"warnings": [...]}, or nothing when there are none."""
    return {"warnings": list(work.warnings)} if work.warnings else {}


def flat(texts: list[Sequence[str]]) -> tuple[list[str], list[int]]:
    """All the texts of a batch's requests in one list, and where each request's texts start."""
    starts = list(itertools.accumulate([0, *map(len, texts)]))
    return [t for request in texts for t in request], starts


__all__ = ["KINDS", "Endpoint", "InputError", "Kind", "Service", "Submit", "Work", "check_text", "check_tokens",
           "flat", "job", "texts_of", "warned", "warnings"]
