"""Translating with an encoder-decoder: the decoding settings (`DecodeConfig`, a recipe's `decode:` section),
`translate`, which the CLI, the server and a translation recipe's evaluation all call, and `translate_n_best`,
the same search giving each sentence's best hypotheses with their scores.

A translator's run directory holds recipe.yaml beside its checkpoints; its `decode:` section is how the run
chose to decode, so translating with one of its checkpoints starts from those settings (`run_decode`).

A sentence may come with a prefix, text its translation must start with (`prefixes=`; on the command line a
`source<TAB>prefix` line, `split_prefixes`): the prefix is tokenized as it is (no start or end symbol), forced
token by token (`decoding.constraints`) and is part of the translation returned.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from tqdm import tqdm

from tformer.configio import check_finite, from_dict, read_yaml
from tformer.data.device import device_of
from tformer.data.lines import check_line_lengths, normalise_text
from tformer.data.padding import pad
from tformer.decoding import Hypothesis, Repetition, beam_search, greedy
from tformer.decoding.beam import STOPPING, check_beam, check_lenpen
from tformer.decoding.captured import DecodeGraphs
from tformer.decoding.layout import DecodingLayout
from tformer.errors import UserError
from tformer.inference.generate import repetition_of
from tformer.inference.loaded import check_kind

T = TypeVar("T")


@dataclass(kw_only=True)
class DecodeConfig:
    beam: int = 4
    lenpen: float = 1.0  # fairseq: score = log p / length ** lenpen
    max_len_a: float = 1.5  # at most a * source_length + b target tokens
    max_len_b: int = 10
    stopping: str = "finished"  # beam search: "finished" (as fairseq, CTranslate2) or "best" (decoding.beam.STOPPING)
    batch_size: int = 64  # sentences per decoding batch
    no_repeat_ngram_size: int = 0  # n >= 1: no n-gram twice in a translation (0: off; decoding.Repetition)
    repetition_penalty: float = 1.0  # > 1: tokens already written score worse (CTRL's rule; 1: off)

    def __post_init__(self) -> None:
        check_finite(self, where="decode.")
        check_beam(self.beam, what="decode.beam")
        check_lenpen(self.lenpen, what="decode.lenpen")
        try:  # Repetition's own check, named as the recipe's keys
            repetition_of(self.no_repeat_ngram_size, self.repetition_penalty)
        except UserError as e:
            raise UserError(f"decode.{e}") from None
        if self.batch_size < 1:
            raise UserError(f"decode.batch_size={self.batch_size} must be at least 1")
        if self.stopping not in STOPPING:
            raise UserError(f"decode.stopping={self.stopping!r} is not allowed; choose one of {', '.join(STOPPING)} "
                             "(finished: once beam hypotheses have finished; best: once none can beat them)")
        if self.max_len_a < 0 or self.max_len_b < 0:
            raise UserError(f"decode.max_len_a={self.max_len_a} and decode.max_len_b={self.max_len_b} must be >= 0 "
                             "(at most a * source length + b target tokens)")

    @property
    def repetition(self) -> Repetition | None:
        """The repetition control the searches take (None: off)."""
        return repetition_of(self.no_repeat_ngram_size, self.repetition_penalty)


def decode_config(base: DecodeConfig | None = None, *, beam: int | None = None, lenpen: float | None = None,
                  stopping: str | None = None, batch_size: int | None = None,
                  no_repeat_ngram_size: int | None = None, repetition_penalty: float | None = None) -> DecodeConfig:
    """`base`'s settings (the defaults without one), with those given here (not None) over them; checked as
    a recipe's own are. The repetition settings given here are checked by `decoding.Repetition` first, so
    they are refused in its words, as the server and `tformer generate` refuse them."""
    repetition_of(no_repeat_ngram_size, repetition_penalty)
    given = {"beam": beam, "lenpen": lenpen, "stopping": stopping, "batch_size": batch_size,
             "no_repeat_ngram_size": no_repeat_ngram_size, "repetition_penalty": repetition_penalty}
    return DecodeConfig(**{**(vars(base) if base is not None else {}),
                           **{k: v for k, v in given.items() if v is not None}})


def check_n_best(n_best: int, *, beam: int, what: str = "n_best") -> None:
    """The one check of how many hypotheses to return per sentence (`tformer translate --n-best`, the
    server's n_best): 1 to the beam size, since a beam search keeps that many; a UserError naming it as
    `what` otherwise."""
    if not 1 <= n_best <= beam:
        raise UserError(f"{what}={n_best} is not allowed; give 1 to the beam size ({beam}), or a wider beam for "
                        "more hypotheses")


def split_prefixes(lines: Sequence[str]) -> tuple[list[str], list[str | None]]:
    """`source<TAB>prefix` lines -> (sources, prefixes): each line split at its first tab; a line without
    one has no prefix (None)."""
    sources, prefixes = [], []
    for line in lines:
        source, tab, prefix = line.partition("\t")
        sources.append(source)
        prefixes.append(prefix if tab else None)
    return sources, prefixes


def prefix_ids(tokenizer: Any, prefix: str | None, *, max_len: int, name: str) -> list[int]:
    """The ids a translation must start with: `prefix` tokenized as it is (no start or end symbol; a
    leading byte-order mark dropped); [] for None or "". A UserError, naming the prefix as `name`, for one
    that holds the end symbol or leaves the model's context no room for one more token."""
    if not prefix:
        return []
    ids = tokenizer.encode(normalise_text(prefix))
    if tokenizer.eos_id in ids:
        raise UserError(f"{name} holds the end symbol (id {tokenizer.eos_id}); a prefix is the start of the "
                        "translation, not a whole one")
    if len(ids) >= max_len:
        raise UserError(f"{name} is {len(ids)} tokens; the model writes at most max_len={max_len}, so a prefix "
                        f"may hold at most {max_len - 1}")
    return ids


def run_decode(checkpoint: str | Path, *, command: str = "translate") -> DecodeConfig | None:
    """The decoding settings of the run a translator's checkpoint belongs to (the `decode:` section of
    RUN_DIR/recipe.yaml beside RUN_DIR/last), or None if there is no recipe.yaml. The checkpoint's kind is
    checked first, for `command`, so the run of another task is named as such."""
    check_kind(checkpoint, command)
    path = Path(checkpoint).resolve().parent / "recipe.yaml"
    if not path.is_file():
        return None
    try:
        recipe = read_yaml(path, what="the file") or {}
        if not isinstance(recipe, dict):
            raise UserError(f"the file holds a {type(recipe).__name__}, not a mapping of sections")
        return from_dict(DecodeConfig, recipe.get("decode") or {}, where="decode.")
    except (ValueError, TypeError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"{path} (the run's recipe beside the checkpoint) is not a valid recipe: {reason}") from None


@dataclass(frozen=True)
class Candidate:
    """One hypothesis of a sentence's n-best list: its detokenized text (a forced prefix included), the score
    the beam search ranked it by (length-normalised, `decoding.beam`) and its log-probability (the end symbol's
    included when it ended with one; `eos`: whether it did or was cut at the maximum length)."""

    text: str
    score: float
    log_prob: float
    eos: bool


@torch.inference_mode()
def translate(model: nn.Module, tokenizer: Any, sentences: list[str], decode: DecodeConfig, *,
              prefixes: Sequence[str | None] | None = None, truncate: bool = False, where: str = "input",
              progress: bool = False, first_line: int = 1, layout: DecodingLayout | None = None,
              capture: bool | None = None, graphs: DecodeGraphs | None = None) -> list[str]:
    """Detokenized translations, in input order; batches sorted by length to waste little padding.
    A sentence longer than the model's context (max_len tokens) is refused with a ValueError naming its
    line of `where` (counted from `first_line`), unless `truncate`, which translates its first max_len tokens
    (as evaluation over a corpus does). `prefixes`: per sentence, text its translation must start with (None
    or "": none; `prefix_ids`). `progress`: a bar over the sentences on stderr (a test set with beam search
    takes minutes). `layout`: the model's decoding layout, kept by its holder (`Loaded.layout`). `capture`:
    captured decoding (None: on a GPU, where it pays; `decoding.captured`), its steps and buffers kept in
    `graphs` by their holder (`Loaded.graphs`; None: kept for this call's batches). A sentence's leading
    byte-order mark is dropped (`data.lines.normalise_text`); an empty sentence translates to ""."""
    graphs = graphs if graphs is not None else DecodeGraphs(model)

    def search(src: Tensor, forced: list[list[int]] | None) -> list[str]:
        common = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, layout=layout,
                      repetition=decode.repetition, prefixes=forced, capture=capture, graphs=graphs)
        if decode.beam == 1:
            tokens = greedy(model, src, **common)
        else:
            tokens = [h[0].tokens for h in beam_search(model, src, beam=decode.beam, lenpen=decode.lenpen,
                                                       stopping=decode.stopping, **common)]
        return [tokenizer.decode(t) for t in tokens]

    return _in_batches(model, tokenizer, sentences, decode, search, empty="", prefixes=prefixes, truncate=truncate,
                       where=where, progress=progress, first_line=first_line)


@torch.inference_mode()
def translate_n_best(model: nn.Module, tokenizer: Any, sentences: list[str], decode: DecodeConfig, *, n_best: int,
                     prefixes: Sequence[str | None] | None = None, truncate: bool = False, where: str = "input",
                     progress: bool = False, first_line: int = 1,
                     layout: DecodingLayout | None = None, capture: bool | None = None,
                     graphs: DecodeGraphs | None = None) -> list[list[Candidate]]:
    """Each sentence's best `n_best` hypotheses (1 to decode.beam, `check_n_best`), best first, with their
    scores: `decoding.beam_search`'s, so the first one's text is what `translate` gives. Fewer than `n_best`
    where the search finished fewer (a forced prefix or a banned repeat can leave too few candidates); none for
    an empty sentence. Beam 1 is the beam search with one beam and the "finished" rule, which is greedy
    decoding, scored. The other arguments are `translate`'s."""
    check_n_best(n_best, beam=decode.beam)
    stopping = "finished" if decode.beam == 1 else decode.stopping
    graphs = graphs if graphs is not None else DecodeGraphs(model)

    def search(src: Tensor, forced: list[list[int]] | None) -> list[list[Candidate]]:
        found = beam_search(model, src, beam=decode.beam, lenpen=decode.lenpen, stopping=stopping, n_best=n_best,
                            max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, layout=layout,
                            repetition=decode.repetition, prefixes=forced, capture=capture, graphs=graphs)
        return [[_candidate(tokenizer, h) for h in hyps] for hyps in found]

    return _in_batches(model, tokenizer, sentences, decode, search, empty=[], prefixes=prefixes, truncate=truncate,
                       where=where, progress=progress, first_line=first_line)


def _candidate(tokenizer: Any, h: Hypothesis) -> Candidate:
    return Candidate(text=tokenizer.decode(h.tokens), score=h.score, log_prob=h.log_prob, eos=h.eos)


def _in_batches(model: nn.Module, tokenizer: Any, sentences: list[str], decode: DecodeConfig,
                search: Callable[[Tensor, list[list[int]] | None], list[T]], *, empty: T,
                prefixes: Sequence[str | None] | None, truncate: bool, where: str, progress: bool,
                first_line: int) -> list[T]:
    """`search(src, prefixes)` over the sentences in batches of decode.batch_size, sorted by length: what
    `translate` and `translate_n_best` share (tokenizing, the length check, padding, the progress bar).
    Results in input order; `empty` for an empty sentence."""
    ids = tokenizer.encode_batch([normalise_text(s) for s in sentences])
    limit = model.config.max_len
    if not truncate:
        check_line_lengths(map(len, ids), limit=limit, max_len=limit, where=where, first=first_line)
    forced = _prefixes(tokenizer, prefixes, len(sentences), max_len=limit, where=where, first_line=first_line)
    ids = [x[:limit] for x in ids]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [copy.copy(empty) for _ in ids]
    todo = [i for i in order if ids[i]]  # an empty line translates to an empty line
    bar = tqdm(total=len(sentences), initial=len(sentences) - len(todo), desc="translating", unit="sentence",
               file=sys.stderr, disable=not progress, dynamic_ncols=True)
    for start in range(0, len(todo), decode.batch_size):
        chunk = todo[start : start + decode.batch_size]
        src = pad([ids[i] for i in chunk], tokenizer.pad_id, device=device_of(model))  # (B, S)
        results = search(src, None if forced is None else [forced[i] for i in chunk])
        for i, result in zip(chunk, results, strict=True):
            out[i] = result
        bar.update(len(chunk))
    bar.close()
    return out


def _prefixes(tokenizer: Any, prefixes: Sequence[str | None] | None, n: int, *, max_len: int, where: str,
              first_line: int) -> list[list[int]] | None:
    """Each sentence's forced ids (`prefix_ids`; errors name the line), or None when no sentence has a prefix."""
    if prefixes is None or not any(prefixes):
        return None
    if len(prefixes) != n:
        raise UserError(f"{len(prefixes)} prefixes for {n} sentences; give one (None: none) per sentence")
    return [prefix_ids(tokenizer, p, max_len=max_len, name=f"{where}:{number}: the prefix")
            for number, p in enumerate(prefixes, first_line)]


__all__ = ["Candidate", "DecodeConfig", "check_n_best", "decode_config", "prefix_ids", "run_decode", "split_prefixes",
           "translate", "translate_n_best"]
