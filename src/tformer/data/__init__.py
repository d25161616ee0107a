"""Data: the one UTF-8 decoder and JSON Lines reader of user files, parallel-text readers, the built-in Bible
corpus, token-budget batching and collation."""

from tformer.data.batching import Batch, TokenBatchSampler, collate, limit_lengths
from tformer.data.bible import LANGUAGES, bible_db_path, clean_verse, load_bible
from tformer.data.lines import DataError, decode_utf8, read_jsonl_records, read_utf8
from tformer.data.parallel import read_jsonl, read_pair, read_parallel, read_tsv
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
    "decode_utf8", "limit_lengths", "load_bible", "read_jsonl", "read_jsonl_records", "read_pair",
    "read_parallel", "read_tsv", "read_utf8",
    "load_bbc_text", "load_bible_text", "load_text_corpus", "read_text_file", "read_text_jsonl", "read_texts",
]
