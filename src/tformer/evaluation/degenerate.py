"""Degenerate output: a translation caught in a loop.

A model that has not learnt when to move on (early in training, or with a short budget) often repeats a
phrase until the length limit, "und er sprach zu ihm zu ihm zu ihm zu ihm ...". BLEU and chrF barely
notice: the repeated words may match the reference and the brevity penalty does not punish length. So we
count such outputs. A hypothesis is degenerate when some word 3-gram occurs in it 3 or more times while
the reference holds that 3-gram fewer than 3 times (a reference that repeats itself, as a psalm's refrain
does, excuses the same repetition). Words are whitespace tokens; occurrences may overlap, so
"zu ihm zu ihm zu ihm zu ihm" holds "zu ihm zu" 3 times.
"""

from __future__ import annotations

from collections import Counter

from tformer.errors import UserError

N, TIMES = 3, 3  # a word N-gram repeated TIMES or more times


def _ngrams(text: str) -> Counter[tuple[str, ...]]:
    words = text.split()
    return Counter(tuple(words[i : i + N]) for i in range(len(words) - N + 1))


def is_degenerate(hypothesis: str, reference: str) -> bool:
    """True if some word 3-gram occurs 3 or more times in `hypothesis` and fewer than 3 times in
    `reference` (see the module docstring for why)."""
    repeated = [gram for gram, count in _ngrams(hypothesis).items() if count >= TIMES]
    if not repeated:
        return False
    in_reference = _ngrams(reference)
    return any(in_reference[gram] < TIMES for gram in repeated)


def degenerate_share(hypotheses: list[str], references: list[str]) -> float:
    """The fraction of hypotheses that are degenerate (0.0 for none at all); one reference each."""
    if len(hypotheses) != len(references):
        raise UserError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    flags = [is_degenerate(h, r) for h, r in zip(hypotheses, references, strict=True)]
    return sum(flags) / len(flags) if flags else 0.0
