"""A checkpoint's manifest: the size and SHA-256 of every file in it, written last, checked when a file is read.

    manifest.json   {"model.safetensors": {"bytes": 81234, "sha256": "<64 hex digits>"},
                     "tokenizer/tokenizer.json": {...}, ...}

One schema, one reader: a mapping of each file's name, relative to the checkpoint and with `/` between its
parts, to exactly `bytes` (an integer >= 0) and `sha256` (64 lower-case hex digits). Anything else (a string
for an entry, a missing `sha256`, a name reaching outside with `..`) is refused with one line naming the entry,
never half-trusted. Every file the save wrote is listed, the tokenizer's included, so that `verify_file`
refuses an edited file (same size, other bytes) and a file added after the save (listed nowhere). A
checkpoint without manifest.json (written before manifests existed, or put together by hand) is read unchecked.

This module sits below everything that reads a checkpoint's files (training.checkpoint reads the weights,
config and trainer state; tokenization.hf the tokenizer), so each of them checks a file the same way.
"""

from __future__ import annotations

import json
import os
import re
import reprlib
from pathlib import Path, PurePosixPath

from tformer.errors import UserError
from tformer.files import sha256

MANIFEST_FILE = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SCHEMA = '{"bytes": N, "sha256": "<64 hex digits>"}'
HEX64 = re.compile(r"[0-9a-f]{64}")
Entries = dict[str, dict[str, int | str]]


def write_manifest(root: Path) -> None:
    """List every file under `root` (but the manifest itself) in `root`/manifest.json; the last file a save
    writes, so a directory with a manifest was written whole."""
    entries = {}
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        name = file.relative_to(root).as_posix()
        if name != MANIFEST_FILE:
            entries[name] = {"bytes": file.stat().st_size, "sha256": sha256(file)}
    with open(root / MANIFEST_FILE, "w", encoding="utf-8") as f:  # an OSError (a full disk) goes to the caller
        f.write(json.dumps(entries, indent=1) + "\n")


def read_manifest(root: str | os.PathLike) -> Entries | None:
    """The checked entries of `root`/manifest.json, or None when the checkpoint has none (read unchecked)."""
    root = Path(root)
    file = root / MANIFEST_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        problem = f"not UTF-8: byte {e.start}" if isinstance(e, UnicodeDecodeError) else f"not valid JSON: {e}"
        raise UserError(f"checkpoint {root}: {MANIFEST_FILE} is corrupt ({problem}); save the checkpoint again, "
                         "or delete the manifest to load it unchecked") from None
    if not isinstance(data, dict):
        raise UserError(f"checkpoint {root}: {MANIFEST_FILE} must map each file's name to {SCHEMA}, "
                         f"not {type(data).__name__}")
    for name, entry in data.items():
        problem = _name_problem(name) or _entry_problem(entry)
        if problem:
            raise UserError(f"checkpoint {root}: {MANIFEST_FILE} entry {reprlib.repr(name)} {problem}")
    return data


def _name_problem(name: str) -> str | None:
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or "\\" in name or ".." in parts or name == MANIFEST_FILE:
        return "is not the name of a file inside the checkpoint"
    return None


def _entry_problem(entry: object) -> str | None:
    if not isinstance(entry, dict):
        return f"must be {SCHEMA}, not {reprlib.repr(entry)}"
    missing = [key for key in ("bytes", "sha256") if key not in entry]
    unknown = sorted(str(key) for key in entry if key not in ("bytes", "sha256"))
    if missing or unknown:
        what = f"lacks {', '.join(map(repr, missing))}" if missing else f"has unknown key {unknown[0]!r}"
        return f"{what}; each entry is {SCHEMA}"
    size, digest = entry["bytes"], entry["sha256"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"has bytes={reprlib.repr(size)}; expected an integer >= 0"
    if not isinstance(digest, str) or not HEX64.fullmatch(digest):
        return f"has sha256={reprlib.repr(digest)}; expected 64 lower-case hex digits"
    return None


def verify_file(root: str | os.PathLike, name: str) -> None:
    """Check the file `root`/`name` (`name` as in the manifest, e.g. "tokenizer/tokenizer.json") against the
    manifest: listed, then its size, then its SHA-256. A ValueError names the file and what is wrong; a
    checkpoint without a manifest passes unchecked."""
    root = Path(root)
    entries = read_manifest(root)
    if entries is None:
        return
    entry = entries.get(name)
    if entry is None:
        raise UserError(f"checkpoint {root}: {name} is not in {MANIFEST_FILE} (a file added or renamed after the "
                         "save is not loaded); remove it, or save the checkpoint again")
    size = (root / name).stat().st_size
    if size != entry["bytes"]:
        raise UserError(f"checkpoint {root}: {name} has {size} bytes, the manifest says {entry['bytes']}: "
                         "the file is truncated or was replaced")
    if sha256(root / name) != entry["sha256"]:
        raise UserError(f"checkpoint {root}: {name} does not match its SHA-256 in {MANIFEST_FILE}: it was edited "
                         "or is corrupt")


def verify_checkpoint(root: str | os.PathLike) -> None:
    """Check a whole checkpoint: every file listed is there and matches, and no file is there unlisted.
    (Loading checks only the files it reads, `verify_file`; this is for choosing between saved copies.)"""
    root = Path(root)
    entries = read_manifest(root)
    if entries is None:
        raise UserError(f"checkpoint {root}: no {MANIFEST_FILE}")
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {MANIFEST_FILE}
    for name in sorted(present | set(entries)):
        if name not in present:
            raise UserError(f"checkpoint {root}: missing {name}, which {MANIFEST_FILE} lists")
        verify_file(root, name)


def verify_tokenizer_file(file: Path) -> None:
    """Check a tokenizer file about to be read against its checkpoint's manifest, when it lies in a
    checkpoint's `tokenizer/` directory (a tokenizer saved on its own has no manifest to check against)."""
    folder = file.parent
    if folder.name == TOKENIZER_DIR and (folder.parent / MANIFEST_FILE).is_file():
        verify_file(folder.parent, f"{TOKENIZER_DIR}/{file.name}")


__all__ = ["MANIFEST_FILE", "read_manifest", "verify_checkpoint", "verify_file", "verify_tokenizer_file",
           "write_manifest"]
