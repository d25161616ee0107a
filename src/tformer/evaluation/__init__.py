"""Evaluation metrics: sacrebleu BLEU and chrF on detokenized text."""

from tformer.evaluation.bleu import Scores, score_corpus

__all__ = ["Scores", "score_corpus"]
