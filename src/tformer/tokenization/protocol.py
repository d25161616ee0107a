"""The `Tokenizer` protocol: what data, training, decoding and inference code needs from a tokenizer, so that
it depends on this and not on a class. A leaf of the package, so the tokenizers' own helpers can name it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What the rest of tformer needs from a tokenizer: text to ids (`encode`, `encode_batch`, adding no
    special token) and back (`decode`, leaving them out), one vocabulary entry for inspection (`token`), the
    special-token ids and the file it is saved to. tformer's own tokenizers fix the ids at 0-3. An
    `HFTokenizer` holds None for a role its vocabulary has no token for (GPT-2 has no pad token), so decoding
    takes a model's ids from its config, and `unk_id`, which only inspection reads, is optional."""

    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int | None

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def token(self, i: int) -> str | None: ...

    def save(self, directory: str | os.PathLike) -> Path: ...


__all__ = ["Tokenizer"]
