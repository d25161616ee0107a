"""Evaluation metrics: sacrebleu BLEU and chrF on detokenized text, and the share of degenerate (looping)
outputs."""

from tformer.evaluation.bleu import Scores, score_corpus
from tformer.evaluation.degenerate import degenerate_share, is_degenerate

__all__ = ["Scores", "degenerate_share", "is_degenerate", "score_corpus"]
