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

from collections.abc import Iterable

from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers, trainers

from tformer.tokenization.backend import BackendTokenizer, check_special_ids, check_vocab_size

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0, 1, 2, 3


class BPETokenizer(BackendTokenizer):
    """A joint byte-level BPE vocabulary: `encode` text to ids and `decode` ids back to text (byte-level:
    `token` shows a space as 'Ġ')."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, backend: Backend) -> None:
        check_special_ids(backend, SPECIAL_TOKENS)
        super().__init__(backend)

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int = 8000, min_frequency: int = 2
    ) -> BPETokenizer:
        """Learn merges from `texts` (e.g. both sides of the training split) until `vocab_size` tokens:
        4 special tokens + 256 bytes + merges. Training is deterministic: the same texts give the same
        vocabulary, whatever their order."""
        check_vocab_size(vocab_size, least=len(SPECIAL_TOKENS) + 256, why=" (at least 4 special tokens and 256 bytes)")
        backend = Backend(models.BPE(unk_token="<unk>"))
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
