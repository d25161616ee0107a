"""Continuous batching (`decoding.continuous.Running`): prompts admitted at different token boundaries into a
running batch get, token for token, what `generate` gives each alone (greedy and seeded sampling, repetition
control, learned positions, RoPE with grouped-query attention, ALiBi); a finished row frees its place for the
next while the others go on; the row cap holds; an error ends its own row only; models with a recurrent state
are refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tformer
from tformer.decoding import generate
from tformer.decoding.continuous import Running, refuses
from tformer.decoding.settings import SampleConfig

VOCAB = 64
EOS = 3
VARIANTS = {"learned": ("gpt-tiny", {}), "rope-gqa": ("llama-tiny", {}),
            "alibi": ("gpt-tiny", {"positions": {"kind": "alibi"}})}
# (arrives before step, prompt, max_new_tokens): different lengths, some longer than the batch's columns then
ARRIVALS = [(0, [5, 9, 13, 2, 7], 9), (0, [8], 4), (2, [11, 4, 4, 9, 1, 6, 12, 20, 21], 7), (3, [17, 30], 12),
            (5, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], 5), (6, [40], 6), (9, [12, 12], 3)]


@torch.no_grad()
def tiny_model(variant: str = "learned", *, max_len: int = 40) -> nn.Module:
    torch.manual_seed(0)
    name, overrides = VARIANTS[variant]
    config = tformer.preset(name, {"vocab_size": VOCAB, "max_len": max_len, "tie_embeddings": False, **overrides})
    model = tformer.build_model(config)
    for p in model.parameters():
        p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def alone(model: nn.Module, prompt: list[int], max_new: int, settings: SampleConfig) -> list[int]:
    stops = (EOS,) if settings.stop else ()
    return generate(model, [prompt], max_new_tokens=max_new, temperature=settings.temperature, top_k=settings.top_k,
                    top_p=settings.top_p, seed=settings.seed, stop_tokens=stops,
                    repetition=settings.repetition)[0]


def staggered(batch: Running, arrivals: list, settings_of) -> dict[int, list[int]]:
    """Admit arrival i before step `at`, step until every row has finished; each row's tokens."""
    got, streamed, step = {}, {i: [] for i in range(len(arrivals))}, 0
    waiting = list(enumerate(arrivals))
    while waiting or batch.live:
        while waiting and waiting[0][1][0] <= step and len(batch.live) < batch.rows:
            i, (_, prompt, max_new) = waiting.pop(0)
            batch.admit(i, prompt, max_new_tokens=max_new, settings=settings_of(i), on_token=streamed[i].append)
        batch.step()
        step += 1
        for key, done in batch.finished():
            assert done.error is None, done.error
            got[key] = done.tokens
    assert got == streamed  # on_token saw exactly the tokens returned
    return got


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_staggered_greedy_rows_equal_each_prompt_alone(variant: str) -> None:
    model = tiny_model(variant)
    greedy = SampleConfig(temperature=0.0, stop=False)
    got = staggered(Running(model, rows=4, eos_id=EOS), ARRIVALS, lambda i: greedy)
    want = {i: alone(model, p, n, greedy) for i, (_, p, n) in enumerate(ARRIVALS)}
    assert got == want
    assert len({tuple(t) for t in want.values()}) == len(want)  # the rows differ: a mix-up would show


def test_staggered_seeded_sampling_and_repetition_rows_equal_each_prompt_alone() -> None:
    model = tiny_model("rope-gqa")
    settings = [SampleConfig(temperature=0.9, top_k=20, seed=11), SampleConfig(temperature=1.2, seed=5),
                SampleConfig(temperature=0.0, repetition_penalty=1.5), SampleConfig(temperature=0.8, top_p=0.9, seed=7),
                SampleConfig(temperature=0.0, no_repeat_ngram_size=2), SampleConfig(temperature=1.0, seed=3),
                SampleConfig(temperature=0.7, seed=2**64 - 1)]
    got = staggered(Running(model, rows=3, eos_id=EOS), ARRIVALS, lambda i: settings[i])
    assert got == {i: alone(model, p, n, settings[i]) for i, (_, p, n) in enumerate(ARRIVALS)}


def test_a_finished_row_frees_its_place_for_the_next_while_the_others_go_on() -> None:
    model = tiny_model()
    greedy = SampleConfig(temperature=0.0, stop=False)
    batch = Running(model, rows=2, eos_id=EOS)
    batch.admit("long", [5, 6, 7], max_new_tokens=8, settings=greedy)
    batch.admit("short", [9], max_new_tokens=2, settings=greedy)
    with pytest.raises(RuntimeError, match="full"):
        batch.admit("third", [4], max_new_tokens=2, settings=greedy)
    batch.step()  # short: its second token, and done
    assert [k for k, _ in batch.finished()] == ["short"] and [r.key for r in batch.live] == ["long"]
    batch.admit("third", [4, 4, 4, 4, 4, 4, 4], max_new_tokens=3, settings=greedy)  # longer than the columns
    assert [r.key for r in batch.live] == ["long", "third"]
    done = {}
    while batch.live:
        batch.step()
        done |= dict(batch.finished())
    assert done["long"].tokens == alone(model, [5, 6, 7], 8, greedy) and done["long"].finish == "length"
    assert done["third"].tokens == alone(model, [4] * 7, 3, greedy)
    assert batch.columns == 0  # nothing live: every column dropped


def test_a_stop_token_ends_a_row_and_is_not_returned() -> None:
    model = tiny_model()
    free = SampleConfig(temperature=0.0, stop=False)
    tokens = alone(model, [5, 9], 10, free)
    stop = tokens[4]
    batch = Running(model, rows=2, eos_id=stop)
    batch.admit(0, [5, 9], max_new_tokens=10, settings=SampleConfig(temperature=0.0))
    while batch.live:
        batch.step()
    ((_, done),) = batch.finished()
    assert done.tokens == tokens[: tokens.index(stop)] and done.finish == "stop"


def test_an_error_ends_its_own_row_and_the_others_go_on() -> None:
    model = tiny_model()
    greedy = SampleConfig(temperature=0.0, stop=False)

    def broken(token: int) -> None:
        raise RuntimeError("the client's stream broke")

    batch = Running(model, rows=3, eos_id=EOS)
    batch.admit("ok", [5, 9, 13], max_new_tokens=6, settings=greedy)
    batch.admit("bad", [8, 8], max_new_tokens=6, settings=greedy, on_token=broken)  # fails at its first token
    batch.admit("long", list(range(40)), max_new_tokens=2, settings=greedy)  # over max_len: refused alone
    done = dict(batch.finished())
    assert "KV" not in str(done["long"].error) and "max_len=40" in str(done["long"].error)
    assert "broke" in str(done["bad"].error) and [r.key for r in batch.live] == ["ok"]
    while batch.live:
        batch.step()
    (( key, finished),) = batch.finished()
    assert key == "ok" and finished.tokens == alone(model, [5, 9, 13], 6, greedy)


def test_a_model_with_a_recurrent_state_is_refused() -> None:
    config = tformer.preset("gpt-tiny", {"vocab_size": VOCAB, "attention": {"kind": "linear"}})
    assert "LinearState" in refuses(tformer.build_model(config))
    assert refuses(tiny_model()) is None
