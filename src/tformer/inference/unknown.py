"""Input a model cannot represent: the share of the input's tokens that are its tokenizer's unknown token, and
the one-line warning the command line (on stderr) and the server (an answer's `warnings`) give for it.

A text the tokenizer cannot represent is not refused (a few unknown characters in a long text do little
harm) but it is not silently scored or translated either: a character-level GPT given Cyrillic, or a
WordPiece model given Chinese, sees <unk> where the text was, and its output says little about the text.

How each tokenizer marks what it cannot represent:
    CharTokenizer        a character never seen in training -> <unk>, one token per character
    WordPieceTokenizer   a word it cannot split into known pieces -> one [UNK] for the whole word
    BPETokenizer         byte-level: every text is bytes it knows, so never <unk>
    HFTokenizer          its own <unk> or [UNK] where it has one; byte-level ones (GPT-2, whose "unknown"
                         is <|endoftext|>, also its start and end token) have none
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tformer.data.lines import normalise_text
from tformer.tokenization import Tokenizer

EXAMPLES = 3  # distinct unknown pieces a warning shows


@dataclass(frozen=True)
class Unknown:
    """How much of some input the tokenizer could not represent: `count` of `total` tokens, and the first
    few distinct pieces of text (`examples`) that became the unknown token."""

    count: int
    total: int
    examples: tuple[str, ...]

    @property
    def share(self) -> float:
        return self.count / self.total if self.total else 0.0

    def __add__(self, other: Unknown) -> Unknown:
        """Both inputs' counts together (a stream's batches so far), the first few examples of either."""
        examples = self.examples + tuple(e for e in other.examples if e not in self.examples)
        return Unknown(count=self.count + other.count, total=self.total + other.total, examples=examples[:EXAMPLES])

    def warning(self) -> str | None:
        """One line saying how much of the input the tokenizer cannot represent, or None if it can all of it:
        `12% of the input's tokens (3 of 25) are unknown to this model's tokenizer (e.g. 'Ж'); its output will
        be poor`."""
        if self.count == 0:
            return None
        shown = f" (e.g. {', '.join(repr(e) for e in self.examples)})" if self.examples else ""
        return (f"{_percent(self.share)} of the input's tokens ({self.count} of {self.total}) are unknown to this "
                f"model's tokenizer{shown}; its output will be poor")


def unknown_tokens(tokenizer: Tokenizer, texts: Sequence[str]) -> Unknown:
    """The unknown tokens of `texts` as `tokenizer` encodes them (each text read as the inference functions
    read it, without a leading byte-order mark): none for a tokenizer without an unknown token of its own."""
    return encode_counted(tokenizer, texts)[1]


def encode_counted(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[list[list[int]], Unknown]:
    """Each text's ids, as `tokenizer.encode` gives them (without a leading byte-order mark), and their unknown
    tokens (`unknown_tokens`), from one pass: a server checks a request's ids and warns of what the tokenizer
    could not represent without encoding its texts twice."""
    unk = _unknown_id(tokenizer)
    count = total = 0
    examples: list[str] = []
    encoded = []
    for text in texts:
        ids, pieces = _encode(tokenizer, normalise_text(text), unk)
        encoded.append(list(ids))
        total += len(ids)
        count += sum(1 for i in ids if i == unk) if unk is not None else 0
        for piece in pieces:
            if len(examples) < EXAMPLES and piece not in examples:
                examples.append(piece)
    return encoded, Unknown(count=count, total=total, examples=tuple(examples))


def unknown_warning(tokenizer: Tokenizer, texts: Sequence[str]) -> str | None:
    """`Unknown.warning` of `texts`: the line the command line prints and the server answers, or None."""
    return unknown_tokens(tokenizer, texts).warning()


def _unknown_id(tokenizer: Tokenizer) -> int | None:
    """The tokenizer's unknown token, unless it has none or its "unknown" is a token with another role (GPT-2's
    <|endoftext|>: byte-level, it never needs one)."""
    unk = tokenizer.unk_id
    return None if unk is None or unk in (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) else unk


def _encode(tokenizer: Tokenizer, text: str, unk: int | None) -> tuple[list[int], list[str]]:
    """(ids, the text of each unknown token, in order): from the backend's character offsets for a
    `tokenizers`-backed tokenizer; a character-level one's tokens are its characters."""
    backend = getattr(tokenizer, "backend", None)
    if backend is not None:
        encoding = backend.encode(text, add_special_tokens=False)
        ids = encoding.ids
        pieces = [text[a:b] for i, (a, b) in zip(ids, encoding.offsets, strict=True) if i == unk]
        return ids, pieces
    ids = tokenizer.encode(text)
    if len(ids) == len(text):  # one token per character
        return ids, [c for c, i in zip(text, ids, strict=True) if i == unk]
    return ids, []


def _percent(share: float) -> str:
    """12% for a share of 0.12; small shares keep a digit that is not 0 (0.3%, 0.02%)."""
    percent = 100 * share
    if percent >= 1:
        return f"{percent:.0f}%"
    return f"{percent:.1g}%"


__all__ = ["Unknown", "encode_counted", "unknown_tokens", "unknown_warning"]
