import pytest

from tformer.evaluation import score_corpus


def test_references_against_themselves_score_100() -> None:
    refs = ["Im Anfang schuf Gott die Himmel und die Erde.", "Und die Erde war wüst und leer."]
    scores = score_corpus(refs, refs)
    assert scores.bleu == pytest.approx(100.0) and scores.chrf == pytest.approx(100.0)
    assert "nrefs:1" in scores.bleu_signature and "tok:13a" in scores.bleu_signature


def test_wrong_output_scores_low_and_lengths_must_match() -> None:
    assert score_corpus(["ganz etwas anderes hier"], ["Im Anfang schuf Gott die Himmel."]).bleu < 10
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        score_corpus(["a", "b"], ["a"])
