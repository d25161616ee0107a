"""Repetition control and forced prefixes (`decoding.constraints`, issue 32): no n-gram twice, the penalty's
sign rule, and a forced prefix that is exact (the model's own output forced gives it back, scores and all)."""

from __future__ import annotations

import math

import pytest
import torch
from test_decoding import EOS, padded_batch, random_model, real, teacher_forced_log_prob

from tformer.decoding import Repetition, beam_search, generate, greedy
from tformer.decoding.constraints import NONE, force
from tformer.errors import UserError


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_a_banned_token_completes_an_earlier_ngram() -> None:
    history = torch.tensor([[5, 6, 7, 5, 6], [NONE, NONE, 5, 6, 7]])  # (2, 5); row 1 left-padded
    out = Repetition(no_repeat_ngram_size=3).apply(torch.zeros(2, 10), history)
    assert out[0].isinf().nonzero().flatten().tolist() == [7]  # 5 6 -> 7 was seen
    assert not out[1].isinf().any()  # 6 7 never seen before
    unigram = Repetition(no_repeat_ngram_size=1).apply(torch.zeros(2, 10), history)
    assert unigram[1].isinf().nonzero().flatten().tolist() == [5, 6, 7]  # padding bans nothing


def test_the_penalty_makes_seen_tokens_worse_whatever_their_sign() -> None:
    scores = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    out = Repetition(penalty=2.0).apply(scores, torch.tensor([[0, 1, 1, NONE]]))
    assert out.tolist() == [[1.0, -4.0, 2.0, -2.0]]  # 1 seen twice, penalised once
    assert scores.tolist() == [[2.0, -2.0, 2.0, -2.0]]  # the input is left as it was


@pytest.mark.parametrize("kwargs, match", [({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size=-1"),
                                           ({"penalty": 0.5}, "repetition_penalty=0.5"),
                                           ({"penalty": math.inf}, "repetition_penalty=inf")])
def test_bad_settings_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        Repetition(**kwargs)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_no_ngram_is_written_twice(n: int, search: str) -> None:
    model = random_model(0, eos_bias=-5.0)  # long outputs: plenty of chances to repeat
    src = padded_batch(0)
    rep = Repetition(no_repeat_ngram_size=n)
    if search == "greedy":
        outs = greedy(model, src, max_len_b=20, repetition=rep)
    else:
        outs = [h.tokens for hs in beam_search(model, src, beam=3, max_len_b=20, repetition=rep, n_best=3)
                for h in hs]
    assert any(len(o) >= 10 for o in outs)
    for o in outs:
        assert len(set(ngrams(o, n))) == len(ngrams(o, n)), o
    plain = greedy(model, src, max_len_b=20)
    assert any(len(set(ngrams(o, n))) < len(ngrams(o, n)) for o in plain)  # the model does repeat without it


def test_generation_bans_repeats_of_the_prompt_too() -> None:
    torch.manual_seed(0)
    import tformer

    model = tformer.build_model(tformer.preset("gpt-tiny", {"vocab_size": 20, "max_len": 64}))
    prompts = [[3, 4, 5, 6], [7, 8]]
    outs = generate(model, prompts, max_new_tokens=30, temperature=0.0,
                    repetition=Repetition(no_repeat_ngram_size=2))
    for p, o in zip(prompts, outs, strict=True):
        assert len(set(ngrams(p + o, 2))) == len(ngrams(p + o, 2))
    sampled = generate(model, prompts, max_new_tokens=20, temperature=1.0, seed=3,
                       repetition=Repetition(no_repeat_ngram_size=2))
    for p, o in zip(prompts, sampled, strict=True):
        assert len(set(ngrams(p + o, 2))) == len(ngrams(p + o, 2))


def test_force_keeps_the_models_own_score() -> None:
    scores = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0]])
    own = torch.tensor([[-0.5, -0.6, -0.7], [-0.5, -0.6, -0.7]])
    out = force(scores, torch.tensor([2, NONE]), own)
    assert out[0].tolist() == [-math.inf, -math.inf, pytest.approx(-0.7)] and torch.equal(out[1], scores[1])


@pytest.mark.parametrize("seed", [0, 1])
def test_forcing_the_models_own_output_gives_it_back(seed: int) -> None:
    model = random_model(seed)
    src = padded_batch(seed)
    plain = greedy(model, src)
    halves = [o[: len(o) // 2] for o in plain]
    assert greedy(model, src, prefixes=halves) == plain
    assert greedy(model, src, prefixes=[o[:-1] for o in plain], use_cache=False) == plain
    # beam 1 is greedy, forced or not; a wider beam forced keeps only hypotheses that start with the prefix
    assert [h[0].tokens for h in beam_search(model, src, beam=1, lenpen=0.0, prefixes=halves)] == plain


def test_a_forced_prefix_starts_every_hypothesis_and_scores_as_the_model_does() -> None:
    model = random_model(2)
    src = padded_batch(2)
    prefixes = [[5, 9, 5], [], [11], [4, 4, 4, 4], [7]]
    for row, hyps in enumerate(beam_search(model, src, beam=3, n_best=3, prefixes=prefixes)):
        for h in hyps:
            assert h.tokens[: len(prefixes[row])] == prefixes[row]
            assert h.log_prob == pytest.approx(teacher_forced_log_prob(model, real(src, row), h.tokens, h.eos),
                                               abs=1e-4)
    for row, out in enumerate(greedy(model, src, prefixes=prefixes)):
        assert out[: len(prefixes[row])] == prefixes[row]


def test_a_prefix_longer_than_the_maximum_length_is_written_whole() -> None:
    model = random_model(0)
    src = padded_batch(0)[3:4, :1]  # one token: at most int(1.2 + 1) = 2 target tokens
    out = greedy(model, src, max_len_b=1, prefixes=[[5, 6, 7, 8]])[0]
    assert out[:4] == [5, 6, 7, 8] and len(out) <= 5


@pytest.mark.parametrize("prefixes, match", [([[EOS]], "holds the end symbol"), ([[5] * 64], "at most 63"),
                                             ([[5], [6]], "2 prefixes for 1 sentences")])
def test_bad_prefixes_are_refused(prefixes: list, match: str) -> None:
    model = random_model(0, max_len=64)
    with pytest.raises(UserError, match=match):
        greedy(model, padded_batch(0)[:1], prefixes=prefixes)

