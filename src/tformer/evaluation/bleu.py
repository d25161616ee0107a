"""Corpus BLEU (Papineni et al. 2002) and chrF (Popović 2015) through sacrebleu, on detokenized output,
with sacrebleu's signature so the numbers can be compared across papers."""

from __future__ import annotations

from dataclasses import dataclass

import sacrebleu


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str

    def __str__(self) -> str:
        return (f"BLEU = {self.bleu:.2f}  ({self.bleu_signature})\n"
                f"chrF = {self.chrf:.2f}  ({self.chrf_signature})")


def score_corpus(hypotheses: list[str], references: list[str]) -> Scores:
    """One reference per hypothesis; sacrebleu's default 13a tokenizer for BLEU."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return Scores(bleu=b.score, chrf=c.score, bleu_signature=str(bleu.get_signature()),
                  chrf_signature=str(chrf.get_signature()))
