"""The degenerate-output metric on closed-form examples: a loop is degenerate, a normal sentence is not,
and a reference that repeats the same 3-gram excuses the hypothesis."""

import pytest

from tformer.evaluation import degenerate_share, is_degenerate

REFERENCE = "Und er sprach zu ihm: Folge mir nach."


def test_a_loop_is_degenerate() -> None:
    assert is_degenerate("zu ihm zu ihm zu ihm zu ihm", REFERENCE)  # "zu ihm zu" 3 times, overlapping
    assert is_degenerate("und und und und und", REFERENCE)  # "und und und" 3 times
    assert is_degenerate("a b c x a b c y a b c", "a b c")  # not back to back: 3 times is 3 times


def test_a_normal_sentence_is_not() -> None:
    assert not is_degenerate("Und er sprach zu ihm: Folge mir nach.", REFERENCE)
    assert not is_degenerate("zu ihm zu ihm zu ihm", REFERENCE)  # "zu ihm zu" only twice
    assert not is_degenerate("a b c a b c", "x")
    assert not is_degenerate("", REFERENCE) and not is_degenerate("zu ihm", "")


def test_a_reference_that_repeats_itself_excuses_the_hypothesis() -> None:
    refrain = "denn seine Güte währt ewig, denn seine Güte währt ewig, denn seine Güte währt ewig"
    assert not is_degenerate(refrain, refrain)
    assert is_degenerate(refrain, "denn seine Güte währt ewig, denn seine Güte währt ewig")  # twice only
    # the reference must repeat the hypothesis's 3-gram, not just any 3-gram
    assert is_degenerate("x y z x y z x y z", "a b c a b c a b c")


def test_the_share() -> None:
    hyps = ["zu ihm zu ihm zu ihm zu ihm", "Folge mir nach.", "und und und und und", "Und es geschah."]
    refs = [REFERENCE, "Folge mir nach.", "und", "Und es geschah."]
    assert degenerate_share(hyps, refs) == 0.5
    assert degenerate_share([], []) == 0.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        degenerate_share(["a", "b"], ["a"])
