"""The fixed-shape decoding path behind `capture` (`decoding/captured.py`, `decoding/static.py`), on the CPU,
where it runs eagerly: the fixed KV cache writes and reads what the growing one does; generation and greedy
translation give the dynamic path's tokens (left padding, stop tokens, seeded sampling, the repetition rule,
forced prefixes), and beam search its hypotheses; kept buffers are reused; and models it cannot take are
refused by name.

B batch, Hk key/value heads, S_max slots, D head width, V vocabulary.
"""

import pytest
import torch
from torch import nn

import tformer
from tformer.decoding import Decoder, beam_search, generate, greedy
from tformer.decoding.captured import StepGraph, bucket, capture_problem, use_capture
from tformer.decoding.constraints import Repetition
from tformer.decoding.sampling import race
from tformer.errors import UserError
from tformer.nn.kv_cache import FixedKVCache, KVCache

VOCAB = 64
PROMPTS = [[5, 9, 13, 2, 7], [3, 8], [11, 4, 4, 9, 1, 6, 12], [17]]  # lengths 5, 2, 7, 1: left padding


@torch.no_grad()
def tiny_gpt(name: str = "gpt-tiny", **overrides: object) -> nn.Module:
    """A seeded tiny GPT whose weights are moved off their small initial values (spread-out logits)."""
    torch.manual_seed(0)
    config = tformer.preset(name, {"vocab_size": VOCAB, "max_len": 40, "tie_embeddings": False, **overrides})
    model = tformer.build_model(config)
    for p in model.parameters():
        p.add_(0.3 * torch.randn_like(p))
    return model


def both(model: nn.Module, prompts: list[list[int]], **kw: object) -> tuple[list[list[int]], list[list[int]]]:
    """(dynamic, fixed-shape) generations with the same settings (greedy unless a temperature is given)."""
    kw = {"temperature": 0.0, **kw}
    return (generate(Decoder(model, capture=False), prompts, max_new_tokens=12, **kw),
            generate(Decoder(model, capture=True), prompts, max_new_tokens=12, **kw))


# --- the fixed KV cache -------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [[0, 1, 2, 3, 4, 5], [0, 0, 2, 3, 4, 5], [1, 1, 2, 2, 5, 5], [5, 4, 3, 2, 1, 0],
                                   [2, 0, 1, 3, 4, 5], [1, 3], [5, 5, 5, 0, 0, 0, 1, 1]])
def test_growing_cache_reorder_keeps_the_rows_asked_for(index: list[int]) -> None:
    """As many rows with a few taking another's keys (copied in place), a permutation, fewer rows, more."""
    b, hk, s_max, d = 6, 2, 8, 4
    cache = KVCache(batch=b, n_kv_heads=hk, max_len=s_max, head_dim=d)
    k, v = torch.randn(b, hk, 3, d), torch.randn(b, hk, 3, d)
    cache.update(k, v)
    cache.reorder(torch.tensor(index))
    rows = torch.tensor(index)
    new_k, new_v = torch.randn(len(index), hk, 1, d), torch.randn(len(index), hk, 1, d)
    got_k, got_v = cache.update(new_k, new_v)  # (B', Hk, 4, D)
    torch.testing.assert_close(got_k, torch.cat([k[rows], new_k], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(got_v, torch.cat([v[rows], new_v], dim=2), rtol=0, atol=0)


def test_fixed_cache_writes_at_the_position_tensor_and_reorders_in_place() -> None:
    b, hk, s_max, d = 3, 2, 8, 4
    grow = KVCache(batch=b, n_kv_heads=hk, max_len=s_max, head_dim=d)
    position = torch.zeros(1, dtype=torch.long)
    fixed = FixedKVCache(torch.zeros(b, hk, s_max, d), torch.zeros(b, hk, s_max, d), position)
    for _ in range(5):
        k, v = torch.randn(b, hk, 1, d), torch.randn(b, hk, 1, d)
        gk, gv = grow.update(k, v)  # (B, Hk, n, D)
        fk, fv = fixed.update(k, v)  # (B, Hk, S_max, D): every slot
        n = gk.shape[2]
        assert fk.shape == (b, hk, s_max, d) and fixed.length + 1 == s_max
        torch.testing.assert_close(fk[:, :, :n], gk, rtol=0, atol=0)
        torch.testing.assert_close(fv[:, :, :n], gv, rtol=0, atol=0)
        assert not fk[:, :, n:].any()  # nothing written past the position
        position.add_(1)
    buffer = fixed.k
    index = torch.tensor([2, 0, 0])
    grow.reorder(index)
    fixed.reorder(index)
    assert fixed.k is buffer  # the same memory a captured step reads
    torch.testing.assert_close(fixed.k[:, :, :5], grow.k[:, :, :5], rtol=0, atol=0)
    with pytest.raises(ValueError, match="one new position"):
        fixed.update(torch.zeros(b, hk, 2, d), torch.zeros(b, hk, 2, d))


def test_a_sharing_cache_prefills_into_the_fixed_buffers() -> None:
    k, v = torch.zeros(2, 1, 6, 4), torch.zeros(2, 1, 6, 4)
    prompt = torch.randn(2, 1, 3, 4)
    out, _ = KVCache.sharing(k, v).update(prompt, prompt)
    assert out.shape[2] == 3 and torch.equal(k[:, :, :3], prompt) and not k[:, :, 3:].any()


# --- GPT generation -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny"])  # learned positions; RoPE with grouped-query
def test_fixed_greedy_equals_dynamic_with_left_padding_and_stop_tokens(name: str) -> None:
    model = tiny_gpt(name)
    for prompts in (PROMPTS, PROMPTS[:1], [[1, 2, 3], [4, 5, 6]]):
        dynamic, fixed = both(model, prompts)
        assert fixed == dynamic
    free = generate(Decoder(model, capture=False), PROMPTS, max_new_tokens=12, temperature=0.0)
    stops = [free[0][3], free[2][1]]  # rows stop at different steps; the others go on
    dynamic, fixed = both(model, PROMPTS, stop_tokens=stops)
    assert fixed == dynamic and min(map(len, dynamic)) < 12 and max(map(len, dynamic)) == 12


def test_the_compiled_fixed_step_on_the_cpu_generates_the_dynamic_tokens() -> None:
    """The fixed-shape step through torch.compile (`StepGraph(compile=True)`) on a CPU: one row, as batch-1
    generation runs it, and a left-padded batch with stops."""
    model = tiny_gpt()
    decoder = Decoder(model, capture=True, compile=True)
    for prompts, stops in ((PROMPTS[:1], ()), (PROMPTS, (7, 11))):
        kw = dict(max_new_tokens=12, temperature=0.0, stop_tokens=stops)
        assert generate(decoder, prompts, **kw) == generate(Decoder(model, capture=False), prompts, **kw)


def test_fixed_sampling_draws_the_dynamic_tokens_from_the_same_seed() -> None:
    model = tiny_gpt()
    for kw in (dict(temperature=1.0), dict(temperature=0.7, top_k=5, top_p=0.9)):
        dynamic, fixed = both(model, PROMPTS, seed=3, **kw)
        assert fixed == dynamic and len({tuple(t) for t in fixed}) > 1
    # A stop ends the dynamic path's draws for that row, which then takes fewer draws a step than the fixed
    # path (where the row goes on): equal tokens are certain for one row, up to the first stop for more.
    first = generate(Decoder(model, capture=False), PROMPTS[:1], max_new_tokens=12, temperature=1.0, seed=5)[0]
    dynamic, fixed = both(model, PROMPTS[:1], temperature=1.0, seed=5, stop_tokens=[first[4]])
    assert fixed == dynamic and len(fixed[0]) <= 4


def test_the_race_draws_what_multinomial_draws() -> None:
    probs = torch.softmax(3 * torch.randn(4, 50), dim=-1)
    a, b = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    for _ in range(5):
        assert torch.equal(race(probs, generator=a), torch.multinomial(probs, 1, generator=b).squeeze(-1))


def test_fixed_generation_keeps_the_repetition_rule_and_streams_in_order() -> None:
    model = tiny_gpt()
    rule = Repetition(no_repeat_ngram_size=2, penalty=1.5)
    dynamic, fixed = both(model, PROMPTS, repetition=rule)
    assert fixed == dynamic
    dynamic, fixed = both(model, PROMPTS, repetition=Repetition(no_repeat_ngram_size=1), temperature=1.0, seed=2)
    assert fixed == dynamic and all(len(set(t)) == len(t) for t in fixed)
    seen: list[tuple[int, int]] = []
    streamed = generate(Decoder(model, capture=True), PROMPTS, max_new_tokens=5, temperature=0.0,
                        on_token=lambda r, t: seen.append((r, t)))
    expected = [(r, streamed[r][i]) for i in range(5) for r in range(len(PROMPTS))]
    assert seen == expected


def test_kept_graphs_are_reused_and_belong_to_their_model() -> None:
    model = tiny_gpt()
    decoder = Decoder(model, capture=True, sync_every=3)  # reads every 3 steps: the tokens are the same
    graphs = decoder.graphs
    dynamic = generate(Decoder(model, capture=False), PROMPTS, max_new_tokens=12, temperature=0.0)
    assert generate(decoder, PROMPTS, max_new_tokens=12, temperature=0.0) == dynamic
    kept = list(graphs._kept.values())
    assert generate(decoder, PROMPTS, max_new_tokens=10, temperature=0.0) == [t[:10] for t in dynamic]
    assert list(graphs._kept.values()) == kept  # the same bucket: the same buffers
    with pytest.raises(ValueError, match="another model"):
        graphs.check(tiny_gpt())
    assert bucket(70, cap=512) == 128 and bucket(70, cap=100) == 100


def test_capture_is_refused_by_name_where_it_cannot_run_and_off_by_default_on_the_cpu() -> None:
    alibi = tiny_gpt(positions={"kind": "alibi"})
    assert "ALiBi" in capture_problem(alibi)
    with pytest.raises(UserError, match="captured decoding is not possible: ALiBi"):
        generate(Decoder(alibi, capture=True), PROMPTS, max_new_tokens=2)
    with pytest.raises(UserError, match="use_cache=False"):
        generate(Decoder(tiny_gpt(), capture=True), PROMPTS, max_new_tokens=2, use_cache=False)
    windowed = tiny_gpt(attention={"kind": "windowed", "window": 4})
    assert "WindowedAttention" in capture_problem(windowed)
    assert not use_capture(None, tiny_gpt())  # the CPU keeps the dynamic path unless asked
    calls = []
    step = StepGraph(lambda: calls.append(1), torch.device("cpu"))
    step(), step(), step()
    assert len(calls) == 3 and not step.captured


# --- greedy translation -------------------------------------------------------------------------------------


def translator(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    config = tformer.preset("transformer-tiny", {"vocab_size": 24, "tie_embeddings": False, "output_bias": True})
    model = tformer.build_model(config)
    with torch.no_grad():
        model.lm_head.bias[2] = 2.0  # the end symbol: sentences end at different steps
    return model


def padded_source(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 24, (5, 9), generator=g)  # (B, S)
    for row, n in enumerate([3, 9, 6, 1, 9]):
        src[row, n:] = 0
    return src


@pytest.mark.parametrize("seed", [0, 1])
def test_fixed_greedy_translation_equals_dynamic(seed: int) -> None:
    model, src = translator(seed), padded_source(seed)
    for kw in ({}, dict(repetition=Repetition(no_repeat_ngram_size=2, penalty=2.0)),
               dict(prefixes=[[5, 6], [], [7], [8, 9, 10], []]), dict(max_len_a=0.5, max_len_b=2)):
        assert greedy(Decoder(model, capture=True), src, **kw) == greedy(Decoder(model, capture=False), src, **kw)


def same_hypotheses(a: list, b: list) -> bool:
    """Tokens and end symbols equal; scores to float32 rounding (the fixed path multiplies B * K rows from
    the first step, the dynamic one B then, so their products round differently)."""
    return all([(h.tokens, h.eos) for h in x] == [(h.tokens, h.eos) for h in y]
               and all(h.score == pytest.approx(g.score, rel=1e-5) for h, g in zip(x, y, strict=True))
               for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("seed", [0, 1])
def test_fixed_beam_search_finds_the_dynamic_hypotheses(seed: int) -> None:
    model, src = translator(seed), padded_source(seed)
    for kw in ({}, dict(beam=1), dict(beam=3, n_best=2, stopping="best", lenpen=0.5),
               dict(repetition=Repetition(no_repeat_ngram_size=2)), dict(prefixes=[[5, 6], [], [7], [8, 9, 10], []])):
        fixed = beam_search(Decoder(model, capture=True), src, **kw)
        dynamic = beam_search(Decoder(model, capture=False), src, **kw)
        assert same_hypotheses(fixed, dynamic), kw
    decoder = Decoder(model, capture=True)
    first = beam_search(decoder, src)
    assert same_hypotheses(beam_search(decoder, src), first)  # kept buffers, reused
