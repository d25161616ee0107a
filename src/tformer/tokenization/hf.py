"""Any Hugging Face `tokenizer.json` (the file that ships with a GPT-2, Llama, ... checkpoint) behind the
`Tokenizer` protocol, and `load_tokenizer`, which picks the tokenizer class from the files in a directory.

Such a tokenizer keeps its own ids, so its special tokens are looked up by their usual names and are None
when the vocabulary has none: GPT-2 has only <|endoftext|> (its <s>, </s> and <unk>, and no padding);
Llama has <s>, </s> and <unk> (no padding).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer as Backend

from tformer.errors import UserError
from tformer.tokenization.backend import FILENAME, BackendTokenizer, read_backend
from tformer.tokenization.bpe import SPECIAL_TOKENS, BPETokenizer
from tformer.tokenization.char import FILENAME as CHAR_FILENAME
from tformer.tokenization.char import CharTokenizer
from tformer.tokenization.protocol import Tokenizer
from tformer.tokenization.wordpiece import SPECIAL_TOKENS as WORDPIECE_SPECIAL_TOKENS
from tformer.tokenization.wordpiece import WordPieceTokenizer

# role -> names tried in order; the first one in the vocabulary gives the id
SPECIAL_NAMES = {
    "pad": ("<pad>", "[PAD]", "<|pad|>", "<|finetune_right_pad_id|>"),
    "bos": ("<s>", "<|begin_of_text|>", "[CLS]", "<|endoftext|>"),
    "eos": ("</s>", "<|end_of_text|>", "[SEP]", "<|endoftext|>"),
    "unk": ("<unk>", "[UNK]", "<|endoftext|>"),
}


class HFTokenizer(BackendTokenizer):
    """A Hugging Face `tokenizers` tokenizer with its own vocabulary and special-token ids."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (self._find(names) for names in SPECIAL_NAMES.values())

    def _find(self, names: Sequence[str]) -> int | None:
        for name in names:
            if (i := self.backend.token_to_id(name)) is not None:
                return i
        return None


def load_tokenizer(path: str | os.PathLike) -> CharTokenizer | BPETokenizer | WordPieceTokenizer | HFTokenizer:
    """The tokenizer saved in `path`: a tokenizer directory, a checkpoint directory (its `tokenizer/`), or
    the file itself. `char_tokenizer.json` is a CharTokenizer; a `tokenizer.json` whose ids 0-3 are
    <pad> <s> </s> <unk> is tformer's BPETokenizer, one whose ids 0-4 are [PAD] [CLS] [SEP] [UNK] [MASK] its
    WordPieceTokenizer, any other `tokenizer.json` an HFTokenizer."""
    path = Path(path)
    if path.is_dir() and not (path / CHAR_FILENAME).is_file() and (path / "tokenizer").is_dir():
        path = path / "tokenizer"  # a checkpoint directory
    if path.is_dir():
        candidates = [path / CHAR_FILENAME, path / FILENAME]
        path = next((p for p in candidates if p.is_file()), path / FILENAME)
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer at {path} (expected {CHAR_FILENAME} or {FILENAME})")
    if path.name == CHAR_FILENAME:
        return CharTokenizer.load(path)
    backend = read_backend(path)
    if all(backend.token_to_id(token) == i for i, token in enumerate(SPECIAL_TOKENS)):
        return BPETokenizer(backend)
    if all(backend.token_to_id(token) == i for i, token in enumerate(WORDPIECE_SPECIAL_TOKENS)):
        return WordPieceTokenizer(backend)
    return HFTokenizer(backend)


def check_vocabulary(tokenizer: Tokenizer, vocab_size: int, *, where: str | os.PathLike) -> None:
    """A ValueError if `tokenizer` makes ids the model has no embedding for (its vocabulary is larger than
    the model's `vocab_size`): the tokenizer belongs to another checkpoint. A smaller one is fine (Hugging
    Face models often pad their embedding tables)."""
    if tokenizer.vocab_size > vocab_size:
        raise UserError(f"{where}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                         f"vocab_size={vocab_size}; ids {vocab_size}..{tokenizer.vocab_size - 1} have no embedding, "
                         "so this tokenizer does not belong to this model")
