"""Translating with an encoder-decoder: `translate`, which the CLI, the server and a translation recipe's
evaluation all call, and `translate_n_best`, the same search giving each sentence's best hypotheses with their
scores. How they search is one `decoding.DecodeConfig`; a run's recipe.yaml holds the settings the run chose
(its `decode:` section, `run_decode`), which translating with one of its checkpoints starts from.

A sentence may come with a prefix, text its translation must start with (`prefixes=`; on the command line a
`source<TAB>prefix` line, `split_prefixes`): the prefix is tokenized as it is (no start or end symbol), forced
token by token (`decoding.constraints`) and is part of the translation returned.

Text is tokenized once (`encode_sentences`), and the ids decoded (`translate_ids`, `n_best_ids`): a server
checks a request's ids when it arrives and decodes the same ids in its batch.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor, nn
from tqdm import tqdm

from tformer.data.device import device_of
from tformer.data.lines import CHARS_PER_TOKEN, check_line_chars, check_line_lengths, normalise_text
from tformer.data.padding import pad
from tformer.decoding import Hypothesis
from tformer.decoding.decoder import Decoder, decoder_of, model_of
from tformer.decoding.search import best_hypotheses, best_tokens
from tformer.decoding.settings import DecodeConfig
from tformer.errors import UserError, allocating
from tformer.inference.loaded import check_kind
from tformer.runs import RunDir
from tformer.tokenization import Tokenizer

T = TypeVar("T")


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


def prefix_ids(tokenizer: Tokenizer, prefix: str | None, *, max_len: int, name: str) -> list[int]:
    """The ids a translation must start with: `prefix` tokenized as it is (no start or end symbol; a
    leading byte-order mark dropped); [] for None or "". A UserError, naming the prefix as `name`, for one
    that holds the end symbol or leaves the model's context no room for one more token."""
    if not prefix:
        return []
    if len(prefix) > max_len * CHARS_PER_TOKEN:  # longer than any prefix the context can hold: not tokenized
        raise UserError(f"{name} is {len(prefix)} characters; the model writes at most max_len={max_len} tokens")
    return checked_prefix(tokenizer, tokenizer.encode(normalise_text(prefix)), max_len=max_len, name=name)


def checked_prefix(tokenizer: Tokenizer, ids: list[int], *, max_len: int, name: str) -> list[int]:
    """A prefix's ids as `prefix_ids` checks them, for a caller that has encoded the prefix already."""
    if tokenizer.eos_id in ids:
        raise UserError(f"{name} holds the end symbol (id {tokenizer.eos_id}); a prefix is the start of the "
                        "translation, not a whole one")
    if len(ids) >= max_len:
        raise UserError(f"{name} is {len(ids)} tokens; the model writes at most max_len={max_len}, so a prefix "
                        f"may hold at most {max_len - 1}")
    return ids


def run_decode(checkpoint: str | Path, *, command: str = "translate") -> DecodeConfig:
    """The decoding settings of the run a translator's checkpoint belongs to (the `decode:` section of
    RUN_DIR/recipe.yaml beside RUN_DIR/last, `runs.RunDir`), or the defaults where there is no recipe.yaml.
    The checkpoint's kind is checked first, for `command`, so the run of another task is named as such."""
    check_kind(checkpoint, command)
    return RunDir.of_checkpoint(checkpoint).settings(DecodeConfig, "decode") or DecodeConfig()


@dataclass(frozen=True)
class Candidate:
    """One hypothesis of a sentence's n-best list: its detokenized text (a forced prefix included), the score
    the beam search ranked it by (length-normalised, `decoding.beam`) and its log-probability (the end symbol's
    included when it ended with one; `eos`: whether it did or was cut at the maximum length)."""

    text: str
    score: float
    log_prob: float
    eos: bool


@dataclass(frozen=True)
class Encoded:
    """Sentences as a search takes them: each one's ids (at most the model's context; [] for an empty
    sentence) and the ids its translation must start with (None when no sentence has a prefix)."""

    ids: list[list[int]]
    forced: list[list[int]] | None = None


def encode_sentences(tokenizer: Tokenizer, sentences: Sequence[str], *, max_len: int,
                     prefixes: Sequence[str | None] | None = None, truncate: bool = False, where: str = "input",
                     first_line: int = 1) -> Encoded:
    """`sentences` tokenized once, each checked against the model's context `max_len` (a UserError naming its
    line of `where`, counted from `first_line`) unless `truncate`, which keeps its first max_len tokens (as
    evaluation over a corpus does); `prefixes`: per sentence, text its translation must start with (None or "":
    none; `prefix_ids`). A sentence's leading byte-order mark is dropped (`data.lines.normalise_text`). A
    sentence too long for the context at any tokenization is refused (or cut) before it is tokenized
    (`data.lines.check_line_chars`)."""
    sentences = check_line_chars([normalise_text(s) for s in sentences], max_len=max_len, where=where,
                                 first=first_line, truncate=truncate)
    with allocating("encoding the sentences"):
        ids = tokenizer.encode_batch(sentences)
    if not truncate:
        check_line_lengths(map(len, ids), limit=max_len, max_len=max_len, where=where, first=first_line)
    forced = _prefixes(tokenizer, prefixes, len(sentences), max_len=max_len, where=where, first_line=first_line)
    return Encoded([x[:max_len] for x in ids], forced)


@torch.inference_mode()
def translate(model: nn.Module | Decoder, tokenizer: Tokenizer, sentences: list[str], decode: DecodeConfig, *,
              prefixes: Sequence[str | None] | None = None, truncate: bool = False, where: str = "input",
              progress: bool = False, first_line: int = 1) -> list[str]:
    """Detokenized translations, in input order, searched as `decode` says; an empty sentence translates to "".
    `model`: a model, or a `decoding.Decoder` holding it with the decoding state it keeps from call to call
    (`Loaded.decoder`). `prefixes`, `truncate`, `where`, `first_line`: as `encode_sentences`'s. `progress`: a
    bar over the sentences on stderr (a test set with beam search takes minutes)."""
    encoded = encode_sentences(tokenizer, sentences, max_len=model_of(model).config.max_len, prefixes=prefixes,
                               truncate=truncate, where=where, first_line=first_line)
    return translate_ids(model, tokenizer, encoded, decode, progress=progress)


@torch.inference_mode()
def translate_n_best(model: nn.Module | Decoder, tokenizer: Tokenizer, sentences: list[str], decode: DecodeConfig,
                     *, n_best: int, prefixes: Sequence[str | None] | None = None, truncate: bool = False,
                     where: str = "input", progress: bool = False, first_line: int = 1) -> list[list[Candidate]]:
    """Each sentence's best `n_best` hypotheses (1 to decode.beam, `check_n_best`), best first, with their
    scores: `decoding.beam_search`'s, so the first one's text is what `translate` gives. Fewer than `n_best`
    where the search finished fewer (a forced prefix or a banned repeat can leave too few candidates); none for
    an empty sentence. The other arguments are `translate`'s."""
    check_n_best(n_best, beam=decode.beam)
    encoded = encode_sentences(tokenizer, sentences, max_len=model_of(model).config.max_len, prefixes=prefixes,
                               truncate=truncate, where=where, first_line=first_line)
    return n_best_ids(model, tokenizer, encoded, decode, n_best=n_best, progress=progress)


def translate_ids(model: nn.Module | Decoder, tokenizer: Tokenizer, encoded: Encoded, decode: DecodeConfig, *,
                  progress: bool = False) -> list[str]:
    """`translate` of sentences already tokenized and checked (`encode_sentences`). A bare model gets one
    `Decoder` for all the call's batches."""
    decoder = decoder_of(model)

    def search(src: Tensor, forced: list[list[int]] | None) -> list[str]:
        return [tokenizer.decode(t) for t in best_tokens(decoder, src, decode, prefixes=forced)]

    return _in_batches(decoder, tokenizer.pad_id, encoded, decode.batch_size, search, empty="", progress=progress)


def n_best_ids(model: nn.Module | Decoder, tokenizer: Tokenizer, encoded: Encoded, decode: DecodeConfig, *,
               n_best: int, progress: bool = False) -> list[list[Candidate]]:
    """`translate_n_best` of sentences already tokenized and checked (`encode_sentences`), as `translate_ids`."""
    decoder = decoder_of(model)

    def search(src: Tensor, forced: list[list[int]] | None) -> list[list[Candidate]]:
        found = best_hypotheses(decoder, src, decode, n_best=n_best, prefixes=forced)
        return [[_candidate(tokenizer, h) for h in hyps] for hyps in found]

    return _in_batches(decoder, tokenizer.pad_id, encoded, decode.batch_size, search, empty=[], progress=progress)


def _candidate(tokenizer: Tokenizer, h: Hypothesis) -> Candidate:
    return Candidate(text=tokenizer.decode(h.tokens), score=h.score, log_prob=h.log_prob, eos=h.eos)


def _in_batches(model: nn.Module | Decoder, pad_id: int, encoded: Encoded, batch_size: int,
                search: Callable[[Tensor, list[list[int]] | None], list[T]], *, empty: T, progress: bool) -> list[T]:
    """`search(src, prefixes)` over the sentences in batches of `batch_size`, sorted by length to waste little
    padding: what `translate_ids` and `n_best_ids` share. Results in input order; `empty` for an empty
    sentence."""
    ids, forced = encoded.ids, encoded.forced
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [copy.copy(empty) for _ in ids]
    todo = [i for i in order if ids[i]]  # an empty line translates to an empty line
    bar = tqdm(total=len(ids), initial=len(ids) - len(todo), desc="translating", unit="sentence",
               file=sys.stderr, disable=not progress, dynamic_ncols=True)
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        with allocating(f"decoding batch {start // batch_size + 1} ({len(chunk)} sentences)"):
            src = pad([ids[i] for i in chunk], pad_id, device=device_of(model_of(model)))  # (B, S)
            results = search(src, None if forced is None else [forced[i] for i in chunk])
        for i, result in zip(chunk, results, strict=True):
            out[i] = result
        bar.update(len(chunk))
    bar.close()
    return out


def _prefixes(tokenizer: Tokenizer, prefixes: Sequence[str | None] | None, n: int, *, max_len: int, where: str,
              first_line: int) -> list[list[int]] | None:
    """Each sentence's forced ids (`prefix_ids`; errors name the line), or None when no sentence has a prefix."""
    if prefixes is None or not any(prefixes):
        return None
    if len(prefixes) != n:
        raise UserError(f"{len(prefixes)} prefixes for {n} sentences; give one (None: none) per sentence")
    return [prefix_ids(tokenizer, p, max_len=max_len, name=f"{where}:{number}: the prefix")
            for number, p in enumerate(prefixes, first_line)]


__all__ = ["Candidate", "Encoded", "check_n_best", "checked_prefix", "encode_sentences", "n_best_ids", "prefix_ids",
           "run_decode", "split_prefixes", "translate", "translate_ids", "translate_n_best"]
