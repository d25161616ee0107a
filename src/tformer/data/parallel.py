"""Readers for parallel (translation) text: one source sentence and its target per example.

Three layouts, chosen by `read_parallel` from the file suffix:
    corpus.tsv              source<TAB>target, one pair a line
    corpus.jsonl            {"src": ..., "tgt": ...}, one object a line (blank lines are skipped)
    (train.en, train.de)    two line-aligned plain-text files, given as a pair of paths

Every reader returns a list of (source, target) string pairs, stripped of surrounding whitespace. Bad data
stops the read with `DataError`, whose one-line message names the file and the 1-based line, so a broken
corpus is fixed at its source rather than silently skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from itertools import zip_longest
from pathlib import Path

Pair = tuple[str, str]
PathLike = str | Path

TSV_SUFFIXES = (".tsv", ".tab")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


class DataError(ValueError):
    """Malformed input data; the message names the file and line."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without its line ending), failing on bytes that are not UTF-8."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}:{number}: not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1})"
                ) from None
            if number == 1:
                line = line.removeprefix("\ufeff")  # a byte-order mark is not text
            yield number, line.rstrip("\r\n")


def _text(value: str, *, path: Path, number: int, side: str) -> str:
    text = value.strip()
    if not text:
        raise DataError(f"{path}:{number}: empty {side}")
    return text


def read_tsv(path: PathLike) -> list[Pair]:
    """Read `source<TAB>target` lines; exactly two columns a line."""
    path = Path(path)
    pairs = []
    for number, line in _lines(path):
        columns = line.split("\t")
        if len(columns) != 2:
            raise DataError(f"{path}:{number}: expected 2 tab-separated columns (source, target), found "
                            f"{len(columns)}")
        src, tgt = columns
        pairs.append((_text(src, path=path, number=number, side="source"),
                      _text(tgt, path=path, number=number, side="target")))
    return pairs


def read_pair(src_path: PathLike, tgt_path: PathLike) -> list[Pair]:
    """Read two line-aligned files: line i of `src_path` translates to line i of `tgt_path`."""
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    pairs = []
    for src_line, tgt_line in zip_longest(_lines(src_path), _lines(tgt_path)):
        if src_line is None or tgt_line is None:
            longer, shorter = (tgt_path, src_path) if src_line is None else (src_path, tgt_path)
            number = (tgt_line or src_line)[0]
            raise DataError(f"{longer}:{number}: no matching line in {shorter}, which has {number - 1} lines "
                            f"(the two files must have equal line counts)")
        number = src_line[0]
        pairs.append((_text(src_line[1], path=src_path, number=number, side="source"),
                      _text(tgt_line[1], path=tgt_path, number=number, side="target")))
    return pairs


def read_jsonl(path: PathLike, *, src_field: str = "src", tgt_field: str = "tgt") -> list[Pair]:
    """Read one JSON object a line with string fields `src_field` and `tgt_field`."""
    path = Path(path)
    pairs = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{number}: invalid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        texts = []
        for field, side in ((src_field, "source"), (tgt_field, "target")):
            if field not in record:
                raise DataError(f"{path}:{number}: missing field {field!r}")
            if not isinstance(record[field], str):
                raise DataError(f"{path}:{number}: field {field!r} must be a string, got "
                                f"{type(record[field]).__name__}")
            texts.append(_text(record[field], path=path, number=number, side=f"{side} ({field!r})"))
        pairs.append((texts[0], texts[1]))
    return pairs


def read_parallel(spec: PathLike | Sequence[PathLike]) -> list[Pair]:
    """Read a parallel corpus, choosing the reader from `spec`: a pair of paths for `read_pair`, or one path
    ending in .tsv / .tab (`read_tsv`) or .jsonl / .ndjson (`read_jsonl`). A corpus with no pair is an error."""
    if isinstance(spec, str | Path):
        path = Path(spec)
        suffix = path.suffix.lower()
        if suffix in TSV_SUFFIXES:
            pairs = read_tsv(path)
        elif suffix in JSONL_SUFFIXES:
            pairs = read_jsonl(path)
        else:
            raise DataError(f"{path}: unknown parallel-corpus suffix {suffix!r}; use one of "
                            f"{', '.join(TSV_SUFFIXES + JSONL_SUFFIXES)}, or a pair of line-aligned files")
    elif len(spec) != 2:
        raise DataError(f"a two-file parallel corpus needs exactly 2 paths (source, target), got {len(spec)}")
    else:
        pairs = read_pair(spec[0], spec[1])
    if not pairs:
        where = spec if isinstance(spec, str | Path) else ", ".join(map(str, spec))
        raise DataError(f"{where}: no sentence pairs (the corpus is empty)")
    return pairs
