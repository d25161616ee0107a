"""What every tokenizer built on a Hugging Face `tokenizers` backend shares: encoding without special
tokens, decoding without them, and the `tokenizer.json` file it is saved to and read from.

Subclasses say how the backend is trained and which ids the special tokens have.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from tokenizers import Tokenizer as Backend

from tformer.errors import UserError
from tformer.manifest import verify_tokenizer_file

FILENAME = "tokenizer.json"
# The largest vocabulary a tokenizer is trained to. The Hugging Face trainers reserve memory in proportion to the
# vocabulary asked for (about 70 bytes a token, at once), so a larger one aborts the process from Rust (no Python
# exception); real vocabularies stay far below it.
MAX_VOCAB = 2**21
T = TypeVar("T", bound="BackendTokenizer")  # typing.Self is Python 3.11+


class BackendTokenizer:
    """A `tokenizers.Tokenizer` behind the tformer `Tokenizer` protocol."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without the special tokens a post-processor would add."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` for many texts at once (in parallel, in Rust)."""
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, leaving out special tokens."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=True)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return self.backend.decode_batch([[int(i) for i in ids] for ids in batch], skip_special_tokens=True)

    def token(self, i: int) -> str | None:
        """The vocabulary entry of id `i`, for inspection."""
        return self.backend.id_to_token(i)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write `directory`/tokenizer.json (creating the directory) and return its path."""
        path = Path(directory) / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path))
        return path

    @classmethod
    def load(cls: type[T], dir_or_file: str | os.PathLike) -> T:
        """Read `tokenizer.json` from a directory (a saved tokenizer, a downloaded checkpoint) or the file."""
        path = Path(dir_or_file)
        if path.is_dir():
            path = path / FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"no {FILENAME} at {path}")
        backend = read_backend(path)
        try:
            return cls(backend)
        except ValueError as e:  # the special tokens of another kind of tokenizer
            raise UserError(f"{path}: {e}") from None


def read_backend(path: Path) -> Backend:
    """A `tokenizers.Tokenizer` from its JSON file, checked first against its checkpoint's manifest when it
    lies in one; a ValueError naming the file if it is malformed (not UTF-8, not JSON, not a tokenizer)."""
    verify_tokenizer_file(path)
    try:
        return Backend.from_file(str(path))
    except BaseException as e:  # tokenizers raises a bare Exception, or a PanicException, for a malformed file
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise  # KeyboardInterrupt, SystemExit
        raise UserError(f"{path}: not a valid tokenizer file ({' '.join(str(e).split())[:200]})") from None


def check_vocab_size(vocab_size: int, *, least: int, why: str = "") -> None:
    """A vocabulary size to train to: in [least, MAX_VOCAB]; `why` says what the least holds."""
    if not least <= vocab_size <= MAX_VOCAB:
        raise UserError(f"vocab_size={vocab_size} must be in [{least}, {MAX_VOCAB}]{why}")


def check_special_ids(backend: Backend, tokens: Sequence[str]) -> None:
    """Raise unless tokens[i] has id i in `backend`."""
    for expected, token in enumerate(tokens):
        found = backend.token_to_id(token)
        if found != expected:
            raise UserError(f"special token {token} has id {found}, expected {expected}")
