"""The model a server holds, and each request checked before it waits for the model (`prepare_*`: its
text against the limits and the model's context, its settings by the library's own checks), into the work
it asks for (`serve.work`).

A prepared request is a `batching.Job` (`work.job`) holding the work of its endpoint; `serve.work` says
which works share a batch and runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from tformer.config import ModelConfig, RNNSeq2SeqConfig, family_of
from tformer.data.lines import normalise_text
from tformer.decoding.beam import check_beam
from tformer.decoding.generate import check_max_new_tokens
from tformer.decoding.settings import DecodeConfig, SampleConfig, with_given
from tformer.errors import UserError
from tformer.inference import (
    Loaded,
    check_n_best,
    check_top,
    label_names,
    load,
    prefix_ids,
    run_decode,
)
from tformer.inference.generate import started
from tformer.inference.unknown import Unknown, encode_counted
from tformer.quant import Int8Linear
from tformer.serve.batching import Job
from tformer.serve.errors import InputError
from tformer.serve.limits import Limits
from tformer.serve.work import (
    AttentionWork,
    ClassifyWork,
    GenerateWork,
    ScoreWork,
    TranslateWork,
    job,
)

MAX_BEAM = 16  # beam sizes a request may ask for: each sentence costs `beam` rows


@dataclass(frozen=True)
class Kind:
    """What a kind of checkpoint serves (besides /health and /info, and /attention where attention is exact)
    and the tokens it adds around a text (`room`: [CLS] and [SEP] for BERT; `start`: one more where the model
    has a start token, as a GPT's document starts after it)."""

    endpoints: tuple[str, ...]
    room: int = 0
    start: bool = False

    def room_of(self, config: ModelConfig) -> int:
        return self.room + (1 if self.start and config.bos_id is not None else 0)


KINDS = {"seq2seq": Kind(("translate",)), "gpt": Kind(("generate", "score"), start=True),
         "bert classifier": Kind(("classify",), room=2), "bert": Kind((), room=2)}
ENDPOINTS = {kind: k.endpoints for kind, k in KINDS.items()}


@dataclass
class Service:
    """A loaded checkpoint (`inference.Loaded`: model, config, tokenizer, kind, decoding layout), what it
    serves, and its limits."""

    loaded: Loaded
    limits: Limits
    decode: DecodeConfig | None = None  # a translator's: its run's recipe.yaml, else the defaults
    endpoints: tuple[str, ...] = ()  # what it serves: ENDPOINTS[kind], and "attention" where attention is exact
    no_maps: str = "its attention is not exact"  # why /attention is not served, where it is not

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

    def text_limit(self, room: int = 0) -> int:
        """Tokens one text may have: the server's --max-tokens, at most the model's context less `room`."""
        context = self.config.max_len - room
        return context if self.limits.max_tokens is None else min(self.limits.max_tokens, context)

    def info(self) -> dict[str, Any]:
        """The model's family and sizes, the endpoints it serves and the server's limits."""
        c = self.config
        sizes = {name: getattr(c, name) for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len")
                 if hasattr(c, name)}  # an RNN encoder-decoder has no heads and no feed-forward
        if getattr(c, "n_decoder_layers", None) is not None:
            sizes["n_decoder_layers"] = c.n_decoder_layers
        packed = sum(m.numel() for m in self.model.modules() if isinstance(m, Int8Linear))  # int8 layers
        sizes["parameters"] = sum(p.numel() for p in self.model.parameters()) + packed
        extra: dict[str, Any] = {}
        if self.decode is not None:  # a translator's
            extra["decode"] = {k: v for k, v in dataclasses.asdict(self.decode).items() if k != "batch_size"}
        if "classify" in self.endpoints:
            extra["labels"] = label_names(c)
        mixer = c.match if isinstance(c, RNNSeq2SeqConfig) else c.attention.kind  # an RNN's MATCH, else the kind
        return {"checkpoint": self.loaded.path, "family": family_of(c), "kind": self.kind,
                "model": type(self.model).__name__, "attention": mixer,
                "device": str(next(self.model.parameters()).device), "dtype": self.loaded.dtype,
                "quantization": self.loaded.quantization,
                "sizes": sizes, "endpoints": list(self.endpoints), "limits": dataclasses.asdict(self.limits),
                "max_beam": MAX_BEAM, **extra}

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
            why = f" ({self.no_maps})" if endpoint == "attention" else ""
            raise InputError(f"/{endpoint} is not served for this {self.kind} checkpoint{why}; its endpoints: "
                             f"{offered} (and GET /health, /info)", status=404)


def load_service(path: str | Path, *, limits: Limits, device: str = "auto", dtype: str = "float32",
                 quantization: str | None = None) -> Service:
    """The checkpoint at `path` (any kind `inference.load` reads: trained here or imported from Hugging
    Face), on `device` in `dtype`, ready to serve; `quantization` ("int8") quantizes it at load, on the CPU."""
    loaded = load(path, device=device, dtype=dtype, quantization=quantization)
    kind = KINDS[loaded.kind]
    decode = None
    if "translate" in kind.endpoints:  # a translator decodes as its run's recipe says, a batch at most at once
        decode = with_given(run_decode(path), batch_size=limits.max_batch)
    no_maps = maps_refused(loaded.model)
    endpoints = kind.endpoints + (("attention",) if no_maps is None else ())
    return Service(loaded=loaded, limits=limits, decode=decode, endpoints=endpoints,
                   **({} if no_maps is None else {"no_maps": no_maps}))


def maps_refused(model: nn.Module) -> str | None:
    """Why `model` has no attention maps to draw (`viz.attention.check_exact`'s words: attention that is
    not exact, or an RNN without attention), or None when every attention layer has a weight matrix."""
    from tformer.viz.attention import check_exact

    try:
        check_exact(model)
    except UserError as e:
        return str(e)
    return None


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


def prepare_translate(service: Service, *, text: str | None, texts: list[str] | None, n_best: int | None = None,
                      prefix: str | list[str | None] | None = None, **given: Any) -> Job:
    """A /translate request's work: its sentences' ids, encoded once and checked, the ids their translations
    must start with, and the search's settings (`given`: the `decoding.DecodeConfig` fields the request set,
    over the run's recipe's)."""
    named = texts_of(text, texts, service.limits)
    for name, t in named:
        if "\n" in t or "\r" in t:
            raise InputError(f"{name} holds a line break; give one sentence a string (texts: a list of them)")
    if given.get("beam") is not None:  # each sentence costs `beam` rows: at most MAX_BEAM here
        check_beam(given["beam"], vocab_size=service.config.vocab_size, most=MAX_BEAM, limit="this server's most")
    decode = with_given(service.decode, **given)
    if n_best is not None:
        check_n_best(n_best, beam=decode.beam)
    ids, unknown = service.encode(named)
    forced, in_prefixes = prefixes_of(service, prefix, texts)
    return job(TranslateWork(tuple(map(tuple, ids)), decode, forced, n_best, warnings=warnings(unknown + in_prefixes)))


def prefixes_of(service: Service, prefix: str | list[str | None] | None,
                texts: list[str] | None) -> tuple[tuple[tuple[int, ...], ...], Unknown]:
    """A /translate request's `prefix` as the ids each translation must start with (() when it has none), and
    what in them the tokenizer cannot represent: a string with `text`, a list as long as
    `texts` with them (null or "": none), each checked as a text and as the library checks a prefix
    (`inference.prefix_ids`)."""
    if prefix is None:
        return (), Unknown(0, 0, ())
    if texts is None and not isinstance(prefix, str):
        raise InputError("prefix is a list; with text, give one string (a list of them goes with texts)")
    if texts is not None and (isinstance(prefix, str) or len(prefix) != len(texts)):
        given = "a string" if isinstance(prefix, str) else f"{len(prefix)} of them"
        raise InputError(f"with texts, give prefix as a list of {len(texts)} strings, one per text (null: none), "
                         f"not {given}")
    named = [("prefix", prefix)] if isinstance(prefix, str) else [(f"prefix[{i}]", p) for i, p in enumerate(prefix)]
    out, given = [], []
    for name, p in named:
        p = None if p is None else check_text(p, name, service.limits, empty=True)
        if p and ("\n" in p or "\r" in p):
            raise InputError(f"{name} holds a line break; a prefix is the start of one sentence's translation")
        out.append(tuple(prefix_ids(service.tokenizer, p, max_len=service.config.max_len, name=name)))
        given += [p] if p else []
    return (tuple(out) if any(out) else ()), encode_counted(service.tokenizer, given)[1]


def prepare_generate(service: Service, *, prompt: str, max_new_tokens: int | None,
                     emit: Callable[[str], None] | None = None, **given: Any) -> Job:
    """A /generate request's work: its prompt's ids (after the model's start token), how many tokens it may
    get, and how it samples (`given`: the `decoding.SampleConfig` fields the request set)."""
    limits = service.limits
    prompt = check_text(prompt, "prompt", limits, empty=True)
    max_new = limits.max_new_tokens if max_new_tokens is None else max_new_tokens
    check_max_new_tokens(max_new, most=limits.max_new_tokens, limit="--max-new-tokens")
    settings = with_given(SampleConfig(), **given)
    (ids,), unknown = encode_counted(service.tokenizer, [prompt])  # once: the ids and the warning
    ids = started(service.config, ids)
    check_tokens(len(ids), service.text_limit(room=1), "prompt", service, what=", less 1 to generate into")
    return job(GenerateWork(tuple(ids), min(max_new, service.config.max_len - len(ids)), emit, settings,
                            warnings=warnings(unknown)))


def prepare_score(service: Service, *, text: str | None, texts: list[str] | None, per_token: bool) -> Job:
    named = texts_of(text, texts, service.limits)
    bos = service.config.bos_id
    ids, unknown = service.encode(named, room=0 if bos is None else 1,
                                  what="" if bos is None else ", less its start token")
    for (name, _), x in zip(named, ids, strict=True):
        if bos is None and len(x) < 2:
            raise InputError(f"{name} is {len(x)} token(s); this model has no start token, so its first token "
                             "is context only: give at least 2")
    return job(ScoreWork(tuple(t for _, t in named), per_token, warnings=warnings(unknown)))


def prepare_classify(service: Service, *, text: str | None, texts: list[str] | None, top: int) -> Job:
    named = texts_of(text, texts, service.limits)
    check_top(top)
    _, unknown = service.encode(named, room=2, what=", less 2 for [CLS] and [SEP]")
    return job(ClassifyWork(tuple(t for _, t in named), top, warnings=warnings(unknown)))


def prepare_attention(service: Service, *, text: str, target: str | None) -> Job:
    limits = service.limits
    text = check_text(text, "text", limits)
    kind = KINDS[service.kind]
    if target is not None:
        if "translate" not in kind.endpoints:
            raise InputError(f"target is only for an encoder-decoder; this is a {service.kind} checkpoint")
        target = check_text(target, "target", limits)
        check_tokens(len(service.tokenizer.encode(target)), service.text_limit(room=1), "target", service,
                     what=", less 1 for the start symbol")
    room = kind.room_of(service.config)
    check_tokens(len(service.tokenizer.encode(text)), service.text_limit(room=room), "text", service)
    return job(AttentionWork(text, target))


def warnings(unknown: Unknown) -> tuple[str, ...]:
    """An answer's "warnings": the one line saying what of its input the model's tokenizer cannot represent
    (`inference.Unknown.warning`, as the command line warns on stderr), or none."""
    line = unknown.warning()
    return (line,) if line else ()


__all__ = ["ENDPOINTS", "KINDS", "MAX_BEAM", "InputError", "Kind", "Service", "check_text", "load_service",
           "prepare_attention", "prepare_classify", "prepare_generate", "prepare_score", "prepare_translate"]
