"""Character-level tokenizer: one token per Unicode character (code point), as in char-rnn and nanoGPT's
Shakespeare. The vocabulary is the four special tokens followed by every character seen in the training
text, sorted by code point, so the same text always gives the same ids. A character never seen encodes as
<unk>.

Ids: <pad> 0, <s> 1, </s> 2, <unk> 3, then the characters. `encode` adds no special tokens. Saved as
`char_tokenizer.json` (a name distinct from the BPE tokenizer's `tokenizer.json`, so `load_tokenizer`
can tell them apart).
"""

from __future__ import annotations

import json
import os
import reprlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from tformer.errors import UserError
from tformer.manifest import verify_tokenizer_file
from tformer.tokenization.bpe import SPECIAL_TOKENS

FILENAME = "char_tokenizer.json"
UNKNOWN_CHAR = "\ufffd"  # how decode shows <unk>


class CharTokenizer:
    """Characters to ids and back; every encoded token is exactly one character of the text."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, chars: Sequence[str]) -> None:
        if any(len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise UserError("chars must be distinct single characters")
        self.chars = list(chars)
        self._ids = {c: i for i, c in enumerate(self.chars, start=len(SPECIAL_TOKENS))}

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        """The vocabulary of `texts`: every distinct character, sorted."""
        seen: set[str] = set()
        for text in texts:
            seen.update(text)
        return cls(sorted(seen))

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.chars)

    def encode(self, text: str) -> list[int]:
        """One id per character, <unk> for characters outside the vocabulary; no <s> or </s>."""
        ids, unk = self._ids, self.unk_id
        return [ids.get(c, unk) for c in text]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, leaving out <pad>, <s> and </s>; <unk> shows as U+FFFD."""
        offset, out = len(SPECIAL_TOKENS), []
        for i in ids:
            i = int(i)
            if i >= offset:
                out.append(self.chars[i - offset])
            elif i == self.unk_id:
                out.append(UNKNOWN_CHAR)
        return "".join(out)

    def token(self, i: int) -> str | None:
        """The vocabulary entry of id `i` (a special token or a character), None outside the vocabulary."""
        if 0 <= i < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[i]
        return self.chars[i - len(SPECIAL_TOKENS)] if len(SPECIAL_TOKENS) <= i < self.vocab_size else None

    def save(self, directory: str | os.PathLike) -> Path:
        """Write `directory`/char_tokenizer.json (creating the directory) and return its path."""
        path = Path(directory) / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"kind": "char", "special_tokens": list(SPECIAL_TOKENS), "chars": self.chars}
        path.write_text(json.dumps(data, indent=0) + "\n")  # ASCII escapes: any character survives
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> CharTokenizer:
        """Read a tokenizer saved by `save`, from its directory (or the JSON file itself). Whatever is wrong
        with the file (not UTF-8, not JSON, not this shape) is a ValueError naming it."""
        path = Path(directory)
        if path.is_dir():
            path = path / FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"no {FILENAME} at {path}")
        verify_tokenizer_file(path)  # in a checkpoint: the file the save wrote, not another
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: not a character tokenizer file (not UTF-8: byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: not valid JSON ({e.msg})") from None
        if not isinstance(data, dict) or data.get("kind") != "char" or not isinstance(data.get("chars"), list):
            raise UserError(f"{path}: not a character tokenizer (expected kind 'char' and a list of chars)")
        if data.get("special_tokens", list(SPECIAL_TOKENS)) != list(SPECIAL_TOKENS):
            raise UserError(f"{path}: special tokens {reprlib.repr(data['special_tokens'])} differ from "
                             f"{list(SPECIAL_TOKENS)}")
        chars = data["chars"]
        bad = next((c for c in chars if not isinstance(c, str) or len(c) != 1), None)
        if bad is not None or len(set(chars)) != len(chars):
            what = f"{reprlib.repr(bad)} is not one character" if bad is not None else "a character is listed twice"
            raise UserError(f"{path}: not a character tokenizer ({what}; chars must be distinct single characters)")
        return cls(chars)
