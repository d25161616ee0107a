"""Speculative decoding: greedy output token for token the target's own (a draft that always, often or never
agrees; K = 1..5; stop tokens; every max_new_tokens up to a bound), sampled output distributed as the
target's own (a chi-square test on an 8-token vocabulary, which the rule "accept every draft token" fails),
the caches rolled back, and the refusals (several prompts, another vocabulary, a recurrent mixer, a draft
context too short, a bad K).

V vocabulary.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch import nn

import tformer
from tformer.decoding import Decoder, generate
from tformer.decoding.speculative import Draft, SpeculativeStats, _Chooser, speculative_generate
from tformer.errors import UserError
from tformer.nn.kv_cache import KVCache

VOCAB = 64
PROMPT = [5, 9, 13, 2, 7]


@torch.no_grad()
def tiny_gpt(seed: int, *, vocab: int = VOCAB, layers: int = 2, width: int = 32, spread: float = 0.3,
             max_len: int = 48, **overrides: object) -> nn.Module:
    """A seeded tiny GPT, its weights moved off their small initial values so that its logits are spread."""
    torch.manual_seed(seed)
    config = tformer.preset("gpt-tiny", {"vocab_size": vocab, "max_len": max_len, "d_model": width,
                                         "d_ff": 2 * width, "n_heads": 2, "n_layers": layers,
                                         "tie_embeddings": False, **overrides})
    model = tformer.build_model(config)
    for p in model.parameters():
        p.add_(spread * torch.randn_like(p))
    return model.eval()


@torch.no_grad()
def nudged(model: nn.Module, scale: float, seed: int = 7) -> nn.Module:
    """A copy of `model` with every weight moved a little: a draft that agrees with it often, not always."""
    torch.manual_seed(seed)
    copy = tformer.build_model(model.config)
    copy.load_state_dict(model.state_dict())
    for p in copy.parameters():
        p.add_(scale * torch.randn_like(p))
    return copy.eval()


@torch.no_grad()
def never_agreeing(model: nn.Module) -> nn.Module:
    """A draft whose logits are all 0, so that it always proposes token 0 (the lowest id of a tie)."""
    copy = tiny_gpt(3, layers=1)
    copy.lm_head.weight.zero_()
    return copy


@pytest.fixture(scope="module")
def target() -> nn.Module:
    return tiny_gpt(0)


@pytest.fixture(scope="module")
def drafts(target: nn.Module) -> dict[str, nn.Module]:
    return {"itself": target, "often": nudged(target, 0.05), "never": never_agreeing(target)}


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("which", ["itself", "often", "never"])
def test_greedy_is_the_target_alone_token_for_token(target: nn.Module, drafts: dict[str, nn.Module], which: str,
                                                    k: int, one_thread: None) -> None:
    alone = generate(target, [PROMPT], max_new_tokens=24, temperature=0)[0]
    stats = SpeculativeStats()
    out = speculative_generate(target, drafts[which], [PROMPT], max_new_tokens=24, draft_tokens=k, temperature=0,
                               stats=stats)
    assert out == [alone]
    assert stats.tokens == 24 and stats.rounds == 24 - stats.accepted
    if which == "never":
        assert 0 not in alone and stats.accepted == 0 and stats.acceptance_rate == 0
    elif which == "itself":
        assert stats.acceptance_rate == 1 and stats.rounds == math.ceil(24 / (k + 1))
    else:
        assert 0 < stats.accepted < stats.proposed  # agrees often, not always


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_stops_where_the_target_alone_stops(target: nn.Module, drafts: dict[str, nn.Module], k: int,
                                                   one_thread: None) -> None:
    alone = generate(target, [PROMPT], max_new_tokens=20, temperature=0)[0]
    decoders = {name: Decoder(d) for name, d in drafts.items()}
    for stop in sorted(set(alone))[:4]:  # each ends the text at its first appearance, not returned
        expected = generate(target, [PROMPT], max_new_tokens=20, temperature=0, stop_tokens=[stop])
        assert expected == [alone[:alone.index(stop)]]
        for name, draft in decoders.items():
            got = speculative_generate(target, draft, [PROMPT], max_new_tokens=20, draft_tokens=k, temperature=0,
                                       stop_tokens=[stop, 999])
            assert got == expected, (name, stop)
    for n in range(0, 13):  # every length, so that a round's last tokens meet the limit at each place
        for name, draft in decoders.items():
            shown: list[int] = []
            got = speculative_generate(target, draft, [PROMPT], max_new_tokens=n, draft_tokens=k, temperature=0,
                                       on_token=lambda row, t, shown=shown: shown.append(t))
            assert got == [alone[:n]] and shown == alone[:n], (name, n)


def test_the_prompt_can_fill_the_context_but_one(target: nn.Module, drafts: dict[str, nn.Module],
                                                 one_thread: None) -> None:
    prompt = [(3 * i) % VOCAB for i in range(45)]  # max_len 48: 3 new tokens at most
    alone = generate(target, [prompt], max_new_tokens=3, temperature=0)
    for draft in drafts.values():
        assert speculative_generate(target, draft, [prompt], max_new_tokens=3, draft_tokens=5, temperature=0) == alone


def test_the_repetition_control_is_the_target_alones(target: nn.Module, drafts: dict[str, nn.Module],
                                                     one_thread: None) -> None:
    rep = tformer.decoding.Repetition(no_repeat_ngram_size=2, penalty=1.5)
    alone = generate(target, [PROMPT], max_new_tokens=20, temperature=0, repetition=rep)
    assert alone != generate(target, [PROMPT], max_new_tokens=20, temperature=0)  # it changes something here
    for draft in drafts.values():
        got = speculative_generate(target, draft, [PROMPT], max_new_tokens=20, draft_tokens=3, temperature=0,
                                   repetition=rep)
        assert got == alone


def test_a_seed_makes_a_sampled_continuation_reproducible(target: nn.Module, drafts: dict[str, nn.Module]) -> None:
    runs = [speculative_generate(target, drafts["often"], [PROMPT], max_new_tokens=12, draft_tokens=3, seed=s,
                                 temperature=0.9, top_k=20, top_p=0.9) for s in (1, 1, 2)]
    assert runs[0] == runs[1] != runs[2]


def test_the_caches_are_rolled_back_to_the_text_kept() -> None:
    cache = KVCache(batch=1, n_kv_heads=1, max_len=8, head_dim=2)
    cache.update(torch.ones(1, 1, 5, 2), torch.ones(1, 1, 5, 2))
    cache.truncate(3)
    k, _ = cache.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    assert cache.length == 4 and k[0, 0, :, 0].tolist() == [1, 1, 1, 0]
    with pytest.raises(ValueError, match="cannot truncate a KV cache of 4 positions to 5"):
        cache.truncate(5)


# --- sampling: the target's own distribution ---------------------------------------------------------------

SMALL = 8  # tokens of the vocabulary in the distribution test
RUNS = 800
SHORT = [1, 4]


@torch.no_grad()
def target_pairs(model: nn.Module, *, temperature: float, top_k: int | None) -> dict[tuple[int, int], float]:
    """The target's exact probability of each pair of first two tokens after SHORT."""
    from tformer.decoding.sampling import filtered_probs

    def probs(ids: list[int]) -> torch.Tensor:
        logits = model(torch.tensor([ids]))[0, -1].float()  # (V,)
        return filtered_probs(logits[None], temperature=temperature, top_k=top_k, top_p=None)[0]

    first = probs(SHORT)
    return {(a, b): float(first[a]) * float(p) for a in range(SMALL) if first[a] > 0
            for b, p in enumerate(probs([*SHORT, a]))}


def chi_square(counts: Counter, expected: dict[tuple[int, int], float], n: int) -> tuple[float, float]:
    """Pearson's statistic of `counts` against n * `expected`, the cells expecting fewer than 5 merged into one;
    and the 0.1% critical value of its degrees of freedom (Wilson-Hilferty's approximation of chi-square)."""
    assert set(counts) <= set(expected), set(counts) - set(expected)  # nothing the target cannot write
    cells, rest_obs, rest_exp = [], 0, 0.0
    for cell, p in expected.items():
        if n * p >= 5:
            cells.append((counts[cell], n * p))
        else:
            rest_obs, rest_exp = rest_obs + counts[cell], rest_exp + n * p
    cells.append((rest_obs, rest_exp))
    stat = sum((o - e) ** 2 / e for o, e in cells if e > 0)
    df = len(cells) - 1
    z = 3.09  # the standard normal's 99.9% point
    return stat, df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def first_pairs(target: Decoder, draft: Decoder, *, temperature: float, top_k: int | None, k: int) -> Counter:
    counts: Counter = Counter()
    for seed in range(RUNS):
        out = speculative_generate(target, draft, [SHORT], max_new_tokens=3, draft_tokens=k, seed=seed,
                                   temperature=temperature, top_k=top_k)[0]
        counts[tuple(out[:2])] += 1
    return counts


CASES = {"t1-k2": dict(temperature=1.0, top_k=None, k=2), "t0.7-top5-k3": dict(temperature=0.7, top_k=5, k=3)}


@pytest.fixture(scope="module")
def small_pair() -> tuple[Decoder, Decoder]:
    """A tiny random target and a different tiny random draft over 8 tokens (decoders: layouts kept)."""
    return (Decoder(tiny_gpt(10, vocab=SMALL, width=16, spread=0.6)),
            Decoder(tiny_gpt(11, vocab=SMALL, width=16, layers=1, spread=0.6)))


@pytest.mark.parametrize("case", list(CASES))
def test_sampled_tokens_follow_the_targets_distribution(small_pair: tuple[Decoder, Decoder], case: str,
                                                        one_thread: None) -> None:
    target, draft = small_pair
    settings = CASES[case]
    expected = target_pairs(target.model, temperature=settings["temperature"], top_k=settings["top_k"])
    stat, critical = chi_square(first_pairs(target, draft, **settings), expected, RUNS)
    assert stat < critical, (stat, critical)


def test_accepting_every_draft_token_fails_the_same_check(small_pair: tuple[Decoder, Decoder],
                                                          monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    # the wrong rule: u = 0 makes u * q(x) >= p(x) false wherever p(x) > 0, so every draft token is kept
    monkeypatch.setattr(_Chooser, "uniform", lambda self, device: 0.0)
    target, draft = small_pair
    settings = CASES["t1-k2"]
    expected = target_pairs(target.model, temperature=1.0, top_k=None)
    stat, critical = chi_square(first_pairs(target, draft, **settings), expected, RUNS)
    assert stat > 3 * critical, (stat, critical)


# --- refusals ----------------------------------------------------------------------------------------------


def test_several_prompts_are_refused(target: nn.Module, drafts: dict[str, nn.Module]) -> None:
    with pytest.raises(UserError, match=r"one prompt at a time \(batch size 1\), got 2"):
        speculative_generate(target, drafts["often"], [PROMPT, PROMPT], max_new_tokens=4)


def test_a_draft_of_another_vocabulary_is_refused(target: nn.Module) -> None:
    with pytest.raises(UserError, match="the draft's vocabulary has 65 tokens and the target's 64"):
        speculative_generate(target, tiny_gpt(1, vocab=65), [PROMPT], max_new_tokens=4)


def test_a_recurrent_mixer_is_refused(target: nn.Module) -> None:
    with pytest.raises(UserError, match="the draft keeps a LinearState"):
        speculative_generate(target, tiny_gpt(1, attention={"kind": "linear"}), [PROMPT], max_new_tokens=4)


def test_a_draft_context_too_short_is_refused(target: nn.Module) -> None:
    with pytest.raises(UserError, match=r"= 25 is more than the draft's max_len=16"):
        speculative_generate(target, tiny_gpt(1, max_len=16), [PROMPT], max_new_tokens=20)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_a_bad_number_of_draft_tokens_is_refused(target: nn.Module, drafts: dict[str, nn.Module], k: object) -> None:
    with pytest.raises(UserError, match=f"draft_tokens={k!r} is not allowed"):
        speculative_generate(target, drafts["often"], [PROMPT], max_new_tokens=4, draft_tokens=k)
    with pytest.raises(UserError, match="at least 1"):
        Draft(drafts["often"], k)
