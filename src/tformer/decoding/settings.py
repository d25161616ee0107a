"""How to decode, as one frozen object per kind of decoding, built once and passed whole:

    DecodeConfig   how an encoder-decoder searches: beam size, length penalty, stopping rule, maximum length,
                   repetition control, sentences per batch (a recipe's `decode:` section)
    SampleConfig   how a language model writes: temperature, top-k, top-p, seed, stopping at the end-of-text
                   token, repetition control (a recipe's `sample:` section holds these and its prompts)

Each is built from a recipe section (`configio.from_dict`), from command-line flags (`cli` makes one flag a
field, from the field's `help`) or from a request body (`serve.requests` makes one JSON field a field whose
`request` is true), and checked once, on construction, in the words of a recipe's keys. A server batches
requests whose settings are equal, so the object is its batch key; a report records it with `asdict`.

Adding an option is one field here, with its help and its check in `__post_init__`; the searches read it
from the object they are given.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tformer.configio import check_finite
from tformer.decoding.beam import STOPPING, check_beam, check_lenpen
from tformer.decoding.constraints import Repetition
from tformer.decoding.sampling import check_sampling
from tformer.errors import UserError

S = TypeVar("S")


def setting(default: Any, help: str, *, none: str | None = None, request: bool = False, metavar: str | None = None,
            low: int | None = None, high: int | None = None) -> Any:
    """A settings field: its default, the help its command-line flag shows (`none`: what a default of None
    means; `metavar`: the value's name there), whether a request body may set it (`request`), and the range
    its flag takes where the type's own is too wide (`low`, `high`)."""
    return field(default=default, metadata={"help": help, "none": none, "request": request, "metavar": metavar,
                                            "low": low, "high": high})


def repetition_of(no_repeat_ngram_size: int | None = None, penalty: float | None = None) -> Repetition | None:
    """The repetition control of a command's or a request's settings (None: each off), checked by
    `Repetition` (whose words the command line, a recipe and the server share); None when it is off."""
    rep = Repetition(no_repeat_ngram_size=0 if no_repeat_ngram_size is None else no_repeat_ngram_size,
                     penalty=1.0 if penalty is None else penalty)
    return None if rep.off else rep


class _Repeats:
    """What both settings share: the repetition control, read by the searches as one `Repetition`."""

    no_repeat_ngram_size: int
    repetition_penalty: float

    @property
    def repetition(self) -> Repetition | None:
        """The repetition control the searches take (None: off)."""
        return repetition_of(self.no_repeat_ngram_size, self.repetition_penalty)

    @staticmethod
    def check_given(**values: Any) -> None:
        """The checks of values given by a flag or a request, in the library's own words (not a recipe's)."""
        repetition_of(values.get("no_repeat_ngram_size"), values.get("repetition_penalty"))

    def _check_repeats(self, where: str) -> None:
        try:  # Repetition's own check, named as the recipe's keys
            repetition_of(self.no_repeat_ngram_size, self.repetition_penalty)
        except UserError as e:
            raise UserError(f"{where}{e}") from None


@dataclass(frozen=True, kw_only=True)
class DecodeConfig(_Repeats):
    """How an encoder-decoder's search runs (`decoding.search`): greedy at beam 1, else beam search."""

    beam: int = setting(4, "beam size (1 = greedy)", request=True)
    lenpen: float = setting(1.0, "length penalty exponent: score = log p / length ** lenpen (fairseq)", request=True)
    max_len_a: float = setting(1.5, "at most a * source length + b target tokens: a")
    max_len_b: int = setting(10, "at most a * source length + b target tokens: b")
    stopping: str = setting("finished", "when a beam search ends: finished (once beam hypotheses have finished, as "
                                        "fairseq and CTranslate2) or best (once no live one can beat them; more steps)")
    batch_size: int = setting(64, "sentences per decoding batch")
    no_repeat_ngram_size: int = setting(0, "never write the same N tokens twice (0 = off)", request=True)
    repetition_penalty: float = setting(1.0, "make each token already written less likely, as CTRL: a number >= 1 "
                                             "(1 = off; 1.2 is usual)", request=True)

    def __post_init__(self) -> None:
        check_finite(self, where="decode.")
        check_beam(self.beam, what="decode.beam")
        check_lenpen(self.lenpen, what="decode.lenpen")
        self._check_repeats("decode.")
        if self.batch_size < 1:
            raise UserError(f"decode.batch_size={self.batch_size} must be at least 1")
        if self.stopping not in STOPPING:
            raise UserError(f"decode.stopping={self.stopping!r} is not allowed; choose one of {', '.join(STOPPING)} "
                             "(finished: once beam hypotheses have finished; best: once none can beat them)")
        if self.max_len_a < 0 or self.max_len_b < 0:
            raise UserError(f"decode.max_len_a={self.max_len_a} and decode.max_len_b={self.max_len_b} must be >= 0 "
                             "(at most a * source length + b target tokens)")

    def search_key(self) -> DecodeConfig:
        """These settings as a server's batch key: equal for searches that may share one call (the batch size
        is the batch's, not the request's)."""
        return dataclasses.replace(self, batch_size=DecodeConfig.batch_size)


@dataclass(frozen=True, kw_only=True)
class SampleConfig(_Repeats):
    """How a language model writes (`decoding.generate`): sampled at a temperature, or greedy at 0."""

    temperature: float = setting(1.0, "0 = greedy", request=True, metavar="T")
    top_k: int | None = setting(None, "sample among the K likeliest tokens", none="no top-k filter", request=True,
                                metavar="K")
    top_p: float | None = setting(None, "sample among the likeliest tokens whose probabilities sum to P (nucleus "
                                        "sampling)", none="no nucleus filter", request=True, metavar="P")
    seed: int | None = setting(None, "makes sampling reproducible (0 .. 2**64 - 1; sample k of a command uses "
                                     "SEED + k)", none="torch's global generator", request=True, metavar="SEED",
                               low=0, high=2**64 - 1)
    stop: bool = setting(True, "stop at the end-of-text token", request=True)
    no_repeat_ngram_size: int = setting(0, "never write the same N tokens twice, the prompt's included (0 = off)",
                                        request=True)
    repetition_penalty: float = setting(1.0, "make each token already in the text less likely, as CTRL: a number "
                                             ">= 1 (1 = off; 1.2 is usual)", request=True)

    def __post_init__(self) -> None:
        check_finite(self, where="sample.")
        try:  # the library's own checks, named as the recipe's keys
            check_sampling(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=self.seed)
        except UserError as e:
            raise UserError(f"sample.{e}") from None
        self._check_repeats("sample.")

    @staticmethod
    def check_given(**values: Any) -> None:
        check_sampling(temperature=values["temperature"], top_k=values["top_k"], top_p=values["top_p"],
                       seed=values["seed"])
        _Repeats.check_given(**values)

    def search_key(self) -> SampleConfig | None:
        """These settings as a server's batch key: greedy generations share one whatever their sampling
        settings (they change nothing); a seeded draw has none (it runs alone: in a batch it would take other
        rows' random numbers)."""
        if self.temperature == 0:
            return dataclasses.replace(self, temperature=0.0, top_k=None, top_p=None, seed=None)
        return None if self.seed is not None else self


def with_given(settings: S, **given: Any) -> S:
    """`settings` with the values given (those not None) in place of its own, checked as on construction. What
    the library checks in its own words (`check_given`: the repetition control, the sampling options) is
    checked that way first, so a flag and a request are refused as the library refuses them."""
    values = {**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)},
              **{k: v for k, v in given.items() if v is not None}}
    settings.check_given(**values)
    return dataclasses.replace(settings, **values)


def settings_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """(field, its type) of a settings class, in order: what the command line and the request bodies are
    made from."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


__all__ = ["DecodeConfig", "SampleConfig", "repetition_of", "setting", "settings_fields", "with_given"]
