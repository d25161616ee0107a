"""POST /translate (an encoder-decoder): {"text"} or {"texts"} -> {"translation"} or {"translations"}; with
"n_best", also "hypotheses" (text, score, log_prob, eos), best first; with "prefix", translations that start
with it.

A translator decodes as its run's recipe says (`inference.run_decode`, read once at load); a request may set
the `decoding.DecodeConfig` fields marked for requests (beam, lenpen, ...) over it. Its work carries its
sentences' ids, tokenized once when the request was checked, and is keyed by its search settings
(`DecodeConfig.search_key()`): neither the prefixes nor n_best change how a search runs.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from tformer.decoding.beam import check_beam
from tformer.decoding.settings import DecodeConfig, with_given
from tformer.inference import Encoded, Loaded, check_n_best, n_best_ids, run_decode, translate_ids
from tformer.inference.translate import checked_prefix
from tformer.inference.unknown import Unknown, encode_counted
from tformer.serve.batching import Job
from tformer.serve.errors import InputError
from tformer.serve.limits import Limits
from tformer.serve.requests import Body, with_settings
from tformer.serve.service import Endpoint, Service, Submit, check_text, flat, job, texts_of, warned, warnings

MAX_BEAM = 16  # beam sizes a request may ask for: each sentence costs `beam` rows


class _Translate(Body):
    example = '{"text": "In the beginning"}'
    text: str | None = None  # one sentence, or
    texts: list[str] | None = None  # several (at most --max-batch)
    n_best: int | None = None  # also the best n_best hypotheses with their scores (1 to the beam)
    prefix: str | list[str | None] | None = None  # text the translation starts with (with texts: one per text)


# the decoding settings a request may give: default, the run's recipe (decode:), else DecodeConfig's
TranslateBody = with_settings("TranslateBody", _Translate, DecodeConfig, defaults=False)


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


# --- at load and in /info --------------------------------------------------------------------------------


def setup(loaded: Loaded, limits: Limits) -> DecodeConfig:
    """How this translator decodes unless a request says otherwise: as its run's recipe says, a batch at most
    at once."""
    return with_given(run_decode(loaded.path), batch_size=limits.max_batch)


def info(service: Service) -> dict[str, Any]:
    """/info's "decode" (the run's settings, `setup`) and the widest beam a request may ask for."""
    decode = {k: v for k, v in dataclasses.asdict(service.state["translate"]).items() if k != "batch_size"}
    return {"max_beam": MAX_BEAM, "decode": decode}


# --- checking a request ----------------------------------------------------------------------------------


def prepare(service: Service, *, text: str | None, texts: list[str] | None, n_best: int | None = None,
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
    decode = with_given(service.state["translate"], **given)
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
    (`inference.prefix_ids`), each encoded once."""
    if prefix is None:
        return (), Unknown(0, 0, ())
    if texts is None and not isinstance(prefix, str):
        raise InputError("prefix is a list; with text, give one string (a list of them goes with texts)")
    if texts is not None and (isinstance(prefix, str) or len(prefix) != len(texts)):
        given = "a string" if isinstance(prefix, str) else f"{len(prefix)} of them"
        raise InputError(f"with texts, give prefix as a list of {len(texts)} strings, one per text (null: none), "
                         f"not {given}")
    named = [("prefix", prefix)] if isinstance(prefix, str) else [(f"prefix[{i}]", p) for i, p in enumerate(prefix)]
    checked = []
    for name, p in named:
        p = None if p is None else check_text(p, name, service.limits, empty=True)
        if p and ("\n" in p or "\r" in p):
            raise InputError(f"{name} holds a line break; a prefix is the start of one sentence's translation")
        checked.append(p or "")
    ids, unknown = encode_counted(service.tokenizer, checked)  # once: the ids and the warning
    out = tuple(tuple(checked_prefix(service.tokenizer, x, max_len=service.config.max_len, name=name))
                for (name, _), x in zip(named, ids, strict=True))
    return (out if any(out) else ()), unknown


# --- running a batch -------------------------------------------------------------------------------------


def run(loaded: Loaded, works: list[TranslateWork]) -> list[list[str] | list[list[dict[str, Any]]]]:
    """Each work's translations (list[str]), or for a work with n_best its sentences' hypotheses (text, score,
    log_prob, eos). The works that ask for hypotheses are decoded in one call of `translate_n_best` (as many
    as the most any asks for, each cut to its own), the others in one of `translate`: each gets the answer it
    would get alone."""
    out: list[Any] = [None] * len(works)
    for scored in (False, True):
        group = [i for i, w in enumerate(works) if (w.n_best is not None) == scored]
        if group:
            for i, answer in zip(group, _run_group(loaded, [works[i] for i in group], scored), strict=True):
                out[i] = answer
    return out


def _run_group(loaded: Loaded, works: list[TranslateWork], scored: bool) -> list[Any]:
    decode = dataclasses.replace(works[0].settings, batch_size=sum(w.size for w in works))  # one call for all
    ids, starts = flat([[list(x) for x in w.ids] for w in works])
    forced = None
    if any(w.forced for w in works):
        forced, _ = flat([[list(x) for x in w.forced] if w.forced else [[]] * w.size for w in works])
    encoded = Encoded(ids, forced)
    if not scored:
        out = translate_ids(loaded.decoder, loaded.tokenizer, encoded, decode)
        return [out[a:b] for a, b in itertools.pairwise(starts)]
    found = n_best_ids(loaded.decoder, loaded.tokenizer, encoded, decode, n_best=max(w.n_best for w in works))
    return [[[dataclasses.asdict(c) for c in hyps[: w.n_best]] for hyps in found[a:b]]
            for w, (a, b) in zip(works, itertools.pairwise(starts), strict=True)]


# --- the answer ------------------------------------------------------------------------------------------


async def respond(service: Service, body: Any, submit: Submit) -> dict[str, Any]:
    """{"translation"} for a text, {"translations"} for texts; with n_best, the best hypothesis's text as the
    translation and "hypotheses" beside it."""
    queued = prepare(service, **body.model_dump())  # the body's fields: text(s), n_best, prefix, settings
    out, notes = await submit(queued), warned(queued.work)
    if body.n_best is None:
        return {**({"translation": out[0]} if body.texts is None else {"translations": out}), **notes}
    best = [hyps[0]["text"] if hyps else "" for hyps in out]
    if body.texts is None:
        return {"translation": best[0], "hypotheses": out[0], **notes}
    return {"translations": best, "hypotheses": out, **notes}


ENDPOINT = Endpoint(name="translate", kinds=("seq2seq",), body=TranslateBody, work=TranslateWork, run=run,
                    respond=respond, setup=setup, info=info)

__all__ = ["ENDPOINT", "MAX_BEAM", "TranslateBody", "TranslateWork", "prepare", "run"]
