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


def test_scores_count_degenerate_outputs() -> None:
    refs = ["Und er sprach zu ihm: Folge mir nach.", "Im Anfang war das Wort.", "Und es geschah."]
    hyps = ["Und er sprach zu ihm zu ihm zu ihm zu ihm", "Im Anfang war das Wort.", "Und es geschah."]
    scores = score_corpus(hyps, refs)
    assert (scores.degenerate_count, scores.sentences) == (1, 3) and scores.degenerate == pytest.approx(1 / 3)
    assert scores.brief() == f"BLEU {scores.bleu:.1f}, chrF {scores.chrf:.1f}, degenerate 33.3% (1 of 3)"
    assert "degenerate = 33.3%  (1 of 3 outputs repeat a word 3-gram" in str(scores)
