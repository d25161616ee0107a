"""Corpus BLEU (Papineni et al. 2002) and chrF (Popović 2015) through sacrebleu, on detokenized output,
with sacrebleu's signature so the numbers can be compared across papers; and the share of degenerate
(looping) outputs, which they hardly see (`degenerate.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import sacrebleu

from tformer.errors import UserError
from tformer.evaluation.degenerate import is_degenerate


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    degenerate: float  # the share of degenerate hypotheses, in [0, 1]
    degenerate_count: int
    sentences: int

    def __str__(self) -> str:
        return (f"BLEU = {self.bleu:.2f}  ({self.bleu_signature})\n"
                f"chrF = {self.chrf:.2f}  ({self.chrf_signature})\n"
                f"degenerate = {100 * self.degenerate:.1f}%  ({self.degenerate_count} of {self.sentences} "
                f"outputs repeat a word 3-gram 3+ times that the reference does not)")

    def brief(self) -> str:
        """One line, e.g. `BLEU 14.2, chrF 41.0, degenerate 1.2% (12 of 1004)`."""
        return (f"BLEU {self.bleu:.1f}, chrF {self.chrf:.1f}, degenerate {100 * self.degenerate:.1f}% "
                f"({self.degenerate_count} of {self.sentences})")


def score_corpus(hypotheses: list[str], references: list[str]) -> Scores:
    """One reference per hypothesis; sacrebleu's default 13a tokenizer for BLEU."""
    if len(hypotheses) != len(references):
        raise UserError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    looping = sum(is_degenerate(h, r) for h, r in zip(hypotheses, references, strict=True))
    return Scores(bleu=b.score, chrf=c.score, bleu_signature=str(bleu.get_signature()),
                  chrf_signature=str(chrf.get_signature()), degenerate=looping / max(len(hypotheses), 1),
                  degenerate_count=looping, sentences=len(hypotheses))
