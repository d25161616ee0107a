"""Tokenizers: text to token ids and back.

Every tokenizer follows the `Tokenizer` protocol (`protocol.py`), so data, training and decoding code depends
on it and not on a class. Special-token ids are fixed across tokenizers: <pad> 0, <s> 1, </s> 2, <unk> 3.
"""

from __future__ import annotations

from tformer.tokenization.bpe import SPECIAL_TOKENS, BPETokenizer
from tformer.tokenization.char import CharTokenizer
from tformer.tokenization.hf import HFTokenizer, check_vocabulary, load_tokenizer
from tformer.tokenization.protocol import Tokenizer
from tformer.tokenization.wordpiece import WordPieceTokenizer

__all__ = ["SPECIAL_TOKENS", "BPETokenizer", "Tokenizer"]
__all__ += ["CharTokenizer", "HFTokenizer", "WordPieceTokenizer", "check_vocabulary", "load_tokenizer"]
