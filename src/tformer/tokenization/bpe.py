"""Byte-level byte-pair encoding (BPE), trained with Hugging Face `tokenizers`.

BPE (Sennrich et al., 2016, https://arxiv.org/abs/1508.07909) starts from single symbols and repeatedly
merges the most frequent adjacent pair into a new symbol until the vocabulary is full. Trained on both
sides of a parallel corpus, one joint vocabulary serves encoder and decoder (and allows tied embeddings).

Byte-level (as in GPT-2): text is split into words and punctuation, each word's UTF-8 bytes are the
starting symbols, and a space is kept as part of the word that follows it. So every string encodes without
<unk>, and decoding gives back exactly the text encoded (umlauts and accents included).

The four special tokens have fixed ids, so models can rely on them: <pad> 0, <s> 1, </s> 2, <unk> 3.
`encode` adds none of them; the collator (`tformer.data.collate`) adds <s> and </s>.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0, 1, 2, 3
FILENAME = "tokenizer.json"


class BPETokenizer:
    """A joint byte-level BPE vocabulary: `encode` text to ids and `decode` ids back to text."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, backend: HFTokenizer) -> None:
        for expected, token in enumerate(SPECIAL_TOKENS):
            found = backend.token_to_id(token)
            if found != expected:
                raise ValueError(f"special token {token} has id {found}, expected {expected}")
        self.backend = backend

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int = 8000, min_frequency: int = 2
    ) -> BPETokenizer:
        """Learn merges from `texts` (e.g. both sides of the training split) until `vocab_size` tokens:
        4 special tokens + 256 bytes + merges. Training is deterministic: the same texts give the same
        vocabulary, whatever their order."""
        if vocab_size < len(SPECIAL_TOKENS) + 256:
            raise ValueError(f"vocab_size={vocab_size} must be at least {len(SPECIAL_TOKENS) + 256} "
                             f"(4 special tokens and 256 bytes)")
        backend = HFTokenizer(models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        backend.train_from_iterator(texts, trainer=trainer)
        return cls(backend)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without <s> or </s>."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` for many texts at once (in parallel, in Rust)."""
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, leaving out special tokens (padding, <s>, </s>)."""
        return self.backend.decode(list(ids), skip_special_tokens=True)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return self.backend.decode_batch([list(ids) for ids in batch], skip_special_tokens=True)

    def token(self, i: int) -> str | None:
        """The vocabulary entry of id `i` (byte-level: a space shows as 'Ġ'), for inspection."""
        return self.backend.id_to_token(i)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write `directory`/tokenizer.json (creating the directory) and return its path."""
        path = Path(directory) / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path))
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> BPETokenizer:
        """Read a tokenizer saved by `save`, from its directory (or the tokenizer.json itself)."""
        path = Path(directory)
        if path.is_dir():
            path = path / FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"no {FILENAME} at {path}")
        return cls(HFTokenizer.from_file(str(path)))
