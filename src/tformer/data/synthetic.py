"""A synthetic sequence task: random strings of symbols and their reverse (or copy), seeded.

Reversing a sequence needs the whole source: the first target symbol is the last source symbol, so a
model that squeezes the source into one fixed-size vector has to hold all of it there, and one that looks
back at the source (attention) only has to find the right position. Accuracy by source length then shows
what the fixed-size code costs as sequences grow (Bahdanau et al. 2015, figure 2).

A sequence is written as text, one character per symbol and no spaces ("qkdmz" -> "zmdkq"), so a
character tokenizer reads one symbol as one token and a translation is checked exactly against its target.

Every split holds each length in [min_len, max_len] equally often (the n % k lengths left over get one
more, chosen by the seed), and no source appears twice, within a split or across splits: the sequences of
each length are drawn once, without replacement, and dealt out to train, valid and test in that order.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence

from tformer.errors import UserError

ALPHABET = string.ascii_lowercase + string.ascii_uppercase + string.digits  # the symbols, in order: 62 at most
TASKS = ("reverse", "copy")


def target_of(source: str, task: str) -> str:
    """The target a task asks for: the source reversed, or copied."""
    if task not in TASKS:
        raise UserError(f"synthetic task={task!r} is not allowed; choose one of {', '.join(TASKS)}")
    return source[::-1] if task == "reverse" else source


def check_lengths(min_len: int, max_len: int, symbols: int) -> None:
    """A one-line UserError for a length range or an alphabet size that no corpus can have."""
    if not 1 <= min_len <= max_len:
        raise UserError(f"data.synthetic min_len={min_len}, max_len={max_len}: need 1 <= min_len <= max_len")
    if not 2 <= symbols <= len(ALPHABET):
        raise UserError(f"data.synthetic.symbols={symbols} is not allowed; choose 2 to {len(ALPHABET)}")


def length_counts(n: int, lengths: range, rng: random.Random) -> dict[int, int]:
    """How many of a split's n sequences have each length: n // k each, one more for n % k lengths drawn."""
    k = len(lengths)
    extra = set(rng.sample(range(k), n % k))
    return {length: n // k + (i in extra) for i, length in enumerate(lengths)}


def distinct_sequences(length: int, count: int, symbols: int, rng: random.Random) -> list[str]:
    """`count` different strings of `length` symbols, drawn uniformly without replacement."""
    if count == 0:
        return []
    space = symbols**length
    if count > space:
        raise UserError(f"data.synthetic asks for {count} sequences of length {length}, but {symbols} symbols make "
                        f"only {space}; raise min_len or symbols, or ask for fewer sequences")
    if space <= 2**62:  # small enough to number: sample the numbers, write each in base `symbols`
        out = []
        for number in rng.sample(range(space), count):
            digits = []
            for _ in range(length):
                number, digit = divmod(number, symbols)
                digits.append(ALPHABET[digit])
            out.append("".join(digits))
        return out
    seen: set[str] = set()
    out = []
    while len(out) < count:  # a repeat is all but impossible here; drawn again if it comes
        text = "".join(rng.choices(ALPHABET[:symbols], k=length))
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def synthetic_splits(*, task: str, min_len: int, max_len: int, symbols: int, sizes: Sequence[int],
                     seed: int) -> list[list[tuple[str, str]]]:
    """The (source, target) pairs of each split, one list per entry of `sizes` (train, valid, test), the same
    for the same arguments; see the module docstring for how lengths and sources are drawn."""
    target_of("", task)
    check_lengths(min_len, max_len, symbols)
    rng = random.Random(seed)
    lengths = range(min_len, max_len + 1)
    counts = [length_counts(n, lengths, rng) for n in sizes]
    splits: list[list[tuple[str, str]]] = [[] for _ in sizes]
    for length in lengths:
        drawn = iter(distinct_sequences(length, sum(c[length] for c in counts), symbols, rng))
        for split, count in zip(splits, counts, strict=True):
            split.extend((s, target_of(s, task)) for s in (next(drawn) for _ in range(count[length])))
    for split in splits:
        rng.shuffle(split)
    return splits


__all__ = ["ALPHABET", "TASKS", "synthetic_splits", "target_of"]
