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

from collections.abc import Iterator, Sequence
from itertools import zip_longest
from pathlib import Path

from tformer.data.lines import JSONL_SUFFIXES, DataError, decode_utf8, existing_file, read_jsonl_records

Pair = tuple[str, str]
PathLike = str | Path

TSV_SUFFIXES = (".tsv", ".tab")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without its line ending), read and decoded (`decode_utf8`) a line at
    a time, so that a long corpus fails at its first bad line without being read whole."""
    with existing_file(path).open("rb") as f:
        for number, raw in enumerate(f, start=1):
            yield number, decode_utf8(raw, where=str(path), first_line=number).rstrip("\r\n")


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
    return [(_text(record[src_field], path=path, number=number, side=f"source ({src_field!r})"),
             _text(record[tgt_field], path=path, number=number, side=f"target ({tgt_field!r})"))
            for number, record in read_jsonl_records(path, strings=(src_field, tgt_field))]


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
