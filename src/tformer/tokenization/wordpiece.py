"""WordPiece, BERT's tokenizer (Wu et al. 2016, https://arxiv.org/abs/1609.08144), trained with Hugging Face
`tokenizers`.

Text is normalised as BERT's uncased models do (lower case, accents stripped, Chinese characters spaced),
split on whitespace and punctuation, and each word is cut greedily into the longest vocabulary pieces; a
piece inside a word carries the prefix "##" ("tokenizer" -> "token", "##izer"). A word with no cut becomes
[UNK]. Decoding joins the pieces back, so it gives the normalised text, not the original.

Ids follow the tformer protocol, with [CLS] as the begin token and [SEP] as the end token:
[PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, [MASK] 4. `encode` adds none of them; `pair` builds BERT's input.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from tformer.tokenization.backend import BackendTokenizer, check_special_ids, check_vocab_size

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]")  # ids 0..4


class WordPieceTokenizer(BackendTokenizer):
    """An uncased WordPiece vocabulary with BERT's five special tokens at fixed ids."""

    pad_id, bos_id, eos_id, unk_id, mask_id = 0, 1, 2, 3, 4
    cls_id, sep_id = bos_id, eos_id
    n_special = len(SPECIAL_TOKENS)

    def __init__(self, backend: Backend) -> None:
        check_special_ids(backend, SPECIAL_TOKENS)
        super().__init__(backend)

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int = 8000, min_frequency: int = 2) -> WordPieceTokenizer:
        """Learn a vocabulary of `vocab_size` pieces (special tokens included) from `texts`; deterministic."""
        check_vocab_size(vocab_size, least=100)
        texts = list(texts)
        backend = _backend(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
        # The trainer numbers a word-inner character ("##e") when it first meets it, in a hash map's random
        # order, and breaks ties between equally frequent merges by those numbers, so the vocabulary would
        # change from run to run. Naming every "##c" up front (as special tokens) numbers them in order.
        chars = sorted({n for c in set().union(*map(set, texts)) for n in backend.normalizer.normalize_str(c)})
        inner = ["##" + c for c in chars if not (c.isspace() or _is_punctuation(c))]
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=[*SPECIAL_TOKENS, *inner], initial_alphabet=chars,
                                            show_progress=False, continuing_subword_prefix="##")
        backend.train_from_iterator(texts, trainer=trainer)
        # The "##c" are ordinary pieces: a fresh tokenizer holds the learnt vocabulary, with the five specials.
        vocab = backend.get_vocab(with_added_tokens=False)
        return cls(_backend(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100,
                                             continuing_subword_prefix="##")))

    def word_starts(self, text: str) -> list[bool]:
        """For each piece of `encode(text)`: True where a word starts (a piece without "##")."""
        return [not token.startswith("##") for token in self.backend.encode(text, add_special_tokens=False).tokens]


def _backend(model: models.WordPiece) -> Backend:
    """A tokenizer around `model` with BERT's uncased normalisation, splitting, decoding and special tokens."""
    backend = Backend(model)
    backend.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True,
                                                    handle_chinese_chars=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return backend


def _is_punctuation(c: str) -> bool:
    """What BERT's pre-tokenizer splits off as a word of its own: ASCII symbols and Unicode punctuation."""
    return (c.isascii() and not c.isalnum()) or unicodedata.category(c).startswith("P")
