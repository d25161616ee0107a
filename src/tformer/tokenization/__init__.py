"""Tokenizers: text to token ids and back.

Every tokenizer follows the `Tokenizer` protocol, so data, training and decoding code depends on it and not
on a class. Special-token ids are fixed across tokenizers: <pad> 0, <s> 1, </s> 2, <unk> 3.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from tformer.tokenization.bpe import SPECIAL_TOKENS, BPETokenizer
from tformer.tokenization.char import CharTokenizer
from tformer.tokenization.hf import HFTokenizer, check_vocabulary, load_tokenizer
from tformer.tokenization.wordpiece import WordPieceTokenizer


@runtime_checkable
class Tokenizer(Protocol):
    """What the rest of tformer needs from a tokenizer."""

    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def save(self, directory: str | os.PathLike) -> Path: ...


__all__ = ["SPECIAL_TOKENS", "BPETokenizer", "Tokenizer"]
__all__ += ["CharTokenizer", "HFTokenizer", "WordPieceTokenizer", "check_vocabulary", "load_tokenizer"]
