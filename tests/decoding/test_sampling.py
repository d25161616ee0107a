"""Logit transforms and the next-token draw, on hand-made distributions: top-k keeps exactly k (ties to the
lower id), top-p keeps the smallest most-likely set whose mass reaches p, temperature -> 0 is greedy (and a
temperature too small to sample with is refused), and a seeded generator makes draws reproducible.

B batch, V vocabulary.
"""

import math
import re

import pytest
import torch
from torch import Tensor

from tformer.decoding import apply_temperature, sample_next, top_k_filter, top_p_filter
from tformer.decoding.sampling import MIN_TEMPERATURE, best, check_sampling


def kept(logits: Tensor) -> list[set[int]]:
    """The ids left finite in each row of (B, V) logits."""
    return [set(torch.isfinite(row).nonzero().flatten().tolist()) for row in logits]


def log_probs(*probs: float) -> Tensor:
    """(1, V) logits of a hand-made distribution."""
    return torch.tensor([[math.log(p) for p in probs]])


def test_top_k_keeps_exactly_the_k_highest() -> None:
    logits = torch.randn(4, 50)
    out = top_k_filter(logits, 5)
    for row, ids in enumerate(kept(out)):
        assert ids == set(logits[row].topk(5).indices.tolist())
    assert torch.equal(out[torch.isfinite(out)], logits[torch.isfinite(out)])  # kept logits unchanged


def test_top_k_ties_keep_lower_ids_and_exactly_k() -> None:
    logits = torch.tensor([[1.0, 3.0, 1.0, 1.0, 1.0, 0.0]])
    assert kept(top_k_filter(logits, 3)) == [{1, 0, 2}]
    assert kept(top_k_filter(torch.zeros(2, 6), 2)) == [{0, 1}, {0, 1}]


def test_top_k_at_least_the_vocabulary_keeps_all() -> None:
    logits = torch.randn(2, 7)
    assert torch.equal(top_k_filter(logits, 7), logits)
    assert torch.equal(top_k_filter(logits, 100), logits)


@pytest.mark.parametrize(("p", "expected"), [
    (0.4, {1}),  # the top token alone has 0.5 >= 0.4
    (0.5, {1}),  # exactly reached by one token
    (0.6, {1, 2}),  # 0.5 < 0.6 <= 0.75
    (0.75, {1, 2}),  # exactly reached by two
    (0.76, {1, 2, 3}),
    (0.95, {0, 1, 2, 3}),
    (1.0, {0, 1, 2, 3}),
    (1e-9, {1}),  # always at least one token
])
def test_top_p_keeps_the_smallest_set_reaching_p(p: float, expected: set[int]) -> None:
    logits = log_probs(0.1, 0.5, 0.25, 0.15)
    assert kept(top_p_filter(logits, p)) == [expected]


def test_top_p_per_row_and_on_ties() -> None:
    logits = torch.cat([log_probs(0.7, 0.1, 0.1, 0.1), log_probs(0.25, 0.25, 0.25, 0.25)])
    assert kept(top_p_filter(logits, 0.5)) == [{0}, {0, 1}]


def test_filters_compose_and_sampling_stays_inside_them() -> None:
    logits = log_probs(0.1, 0.5, 0.25, 0.15).repeat(2000, 1)  # (B, V)
    g = torch.Generator().manual_seed(0)
    tokens = sample_next(logits, top_k=3, top_p=0.7, generator=g)  # top-3 = {1, 2, 3}; nucleus 0.7 -> {1, 2}
    assert set(tokens.tolist()) == {1, 2}
    share = (tokens == 1).float().mean().item()  # renormalised: 0.5 / 0.75
    assert abs(share - 2 / 3) < 0.05


def test_temperature_scales_logits() -> None:
    logits = torch.randn(3, 10)
    assert torch.allclose(apply_temperature(logits, 0.5), logits * 2)
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(logits, 0.0)


def test_temperature_towards_zero_is_greedy() -> None:
    logits = torch.randn(64, 100)
    argmax = logits.argmax(dim=-1)
    logits[torch.arange(64), argmax] += 1.0  # a gap of at least 1: e^(-1 / 0.001) is 0 in float32
    assert torch.equal(sample_next(logits, temperature=0.0), argmax)
    assert torch.equal(sample_next(logits, greedy=True, temperature=5.0), argmax)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample_next(logits, temperature=MIN_TEMPERATURE, generator=g), argmax)
    tied = torch.tensor([[1.0, 3.0, 3.0, -2.0]])
    assert set(sample_next(tied.expand(200, 4), temperature=MIN_TEMPERATURE, generator=g).tolist()) == {1, 2}
    huge = torch.tensor([[3e38, 1e38, -3e38]])  # divided by 0.001 without the shift: inf - inf = nan
    assert sample_next(huge, temperature=MIN_TEMPERATURE, generator=g).tolist() == [0]


@pytest.mark.parametrize("temperature", [0.000999, 1e-4, 1e-30, 1e-300, 5e-324])
def test_temperatures_too_small_to_sample_with_are_refused_everywhere(temperature: float) -> None:
    message = re.escape(f"temperature={temperature} is too small to sample with; give 0 (greedy) or at least 0.001")
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_sampling(temperature=temperature, top_k=None, top_p=None)
    with pytest.raises(ValueError, match=message):  # the Python API refuses it with the same line
        sample_next(torch.randn(1, 5), temperature=temperature)
    check_sampling(temperature=MIN_TEMPERATURE, top_k=None, top_p=None)
    check_sampling(temperature=0.0, top_k=None, top_p=None)


def test_greedy_ties_pick_the_lower_id() -> None:
    assert sample_next(torch.tensor([[0.0, 2.0, 2.0]]), temperature=0.0).tolist() == [1]


def test_best_is_argmax_first_maximum_on_ties() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (64, 300), generator=g).float()  # many ties in every row
    scores[3] = float("-inf")
    scores[5, 7] = float("inf")
    assert torch.equal(best(scores), scores.argmax(dim=-1))
    assert best(torch.tensor([[1.0, 3.0, 3.0], [5.0, 5.0, 0.0]])).tolist() == [1, 0]


def test_same_seed_same_samples_different_seeds_differ() -> None:
    logits = torch.randn(8, 100)

    def draw(seed: int) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return [t for _ in range(5) for t in sample_next(logits, top_p=0.95, generator=g).tolist()]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


@pytest.mark.parametrize(("options", "name"), [
    (dict(temperature=-1.0), "temperature"), (dict(top_k=0), "top_k"), (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
])
def test_bad_options_name_the_value(options: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        sample_next(torch.randn(1, 5), **options)


@pytest.mark.parametrize(("options", "message"), [
    ({"temperature": float("nan")}, "temperature=nan must be a finite number >= 0"),
    ({"temperature": float("inf")}, "temperature=inf must be a finite number >= 0"),
    ({"temperature": 1.0, "seed": 2**64}, r"seed=18446744073709551616 is not allowed; give an integer in \[0, 2\*\*64"),
    ({"temperature": 1.0, "seed": -1}, r"seed=-1 is not allowed; give an integer in \[0, 2\*\*64 - 1\]"),
    ({"temperature": 1.0, "top_k": 10**30}, r"top_k=1" + "0" * 30 + r" does not fit 64 bits; give an integer in "
                                            r"\[1, 2\*\*63 - 1\]"),
])
def test_check_sampling_refuses_non_finite_and_overflowing_values(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_sampling(**{"top_k": None, "top_p": None, **options})
    check_sampling(temperature=0.5, top_k=None, top_p=None, seed=2**64 - 1)
