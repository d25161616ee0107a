"""Data: parallel-text readers, the built-in Bible corpus, token-budget batching and collation."""

from tformer.data.batching import Batch, TokenBatchSampler, collate, limit_lengths
from tformer.data.bible import LANGUAGES, bible_db_path, clean_verse, load_bible
from tformer.data.parallel import DataError, read_jsonl, read_pair, read_parallel, read_tsv
from tformer.data.text import (
    load_bbc_text,
    load_bible_text,
    load_text_corpus,
    read_text_file,
    read_text_jsonl,
    read_texts,
)

__all__ = [
    "LANGUAGES", "Batch", "DataError", "TokenBatchSampler", "bible_db_path", "clean_verse", "collate",
    "limit_lengths", "load_bible", "read_jsonl", "read_pair", "read_parallel", "read_tsv",
    "load_bbc_text", "load_bible_text", "load_text_corpus", "read_text_file", "read_text_jsonl", "read_texts",
]
