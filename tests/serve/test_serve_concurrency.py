"""Concurrent requests to a real server: every one is answered, each answer is what the library gives that
request alone, and the server's /info shows that they were decoded together, in one batch. Streamed
generation: server-sent `token` events whose pieces add up to the `done` answer, batched streams included,
micro-batched and continuously batched.

The servers here take as many sentences in a batch as a test sends at once (--max-batch), and their batches
wait until they are full (`serving.until_full`): the requests sent together from threads make one batch
whenever they arrive, so nothing here depends on timing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from serving import call, events, sentences, start, until_full

from tformer.decoding import SampleConfig
from tformer.inference import DecodeConfig, continue_prompt, load, score_lines, top_labels, translate

N = 8


def together(n: int, request: Callable[[int], object]) -> list[object]:
    """`request(i)` for i < n from n threads released at once; their results in order."""
    barrier, out = threading.Barrier(n), [None] * n

    def work(i: int) -> None:
        barrier.wait(timeout=60)
        out[i] = request(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return out


def batches(url: str) -> dict:
    return call(url, "GET", "/info")[1]["batches"]


def test_concurrent_translations_are_batched_and_each_is_its_own(checkpoints: dict[str, Path]) -> None:
    loaded = load(checkpoints["seq2seq"])
    model, tokenizer = loaded.model, loaded.tokenizer
    texts = sentences(N, seed=5)
    alone = [translate(model, tokenizer, [t], DecodeConfig(beam=2, max_len_b=6, max_len_a=1.0))[0] for t in texts]
    assert len(set(alone)) > 1
    with start(checkpoints["seq2seq"], max_batch=N, sleep=until_full) as url:
        answers = together(N, lambda i: call(url, "POST", "/translate", {"text": texts[i]}))
        stats = batches(url)
    assert answers == [(200, {"translation": a}) for a in alone]
    assert stats["requests"] == N and stats["batches"] == 1 and stats["largest"] == N


def test_concurrent_generations_scores_and_labels_are_batched(checkpoints: dict[str, Path]) -> None:
    loaded = load(checkpoints["gpt"])
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = [s[: 3 + i] for i, s in enumerate(sentences(N, seed=6))]  # prompts of different lengths
    alone = [continue_prompt(model, tokenizer, p, SampleConfig(temperature=0.0), max_new_tokens=6 + i)
             for i, p in enumerate(prompts)]
    assert len(set(alone)) > 1
    lines = sentences(N, seed=7)
    scores = [score_lines(model, tokenizer, [line])[0].log_prob for line in lines]
    with start(checkpoints["gpt"], max_batch=N, sleep=until_full, max_new_tokens=20,
               generate_batching="micro") as url:
        answers = together(N, lambda i: call(url, "POST", "/generate", {"prompt": prompts[i], "temperature": 0,
                                                                         "max_new_tokens": 6 + i}))
        assert [a[1]["text"] for a in answers] == alone
        assert batches(url)["sizes"] == {str(N): 1}
        scored = together(N, lambda i: call(url, "POST", "/score", {"text": lines[i], "per_token": False}))
        assert [s[1]["score"]["log_prob"] for s in scored] == pytest.approx(scores, rel=1e-5)
        stats = batches(url)
    assert stats["requests"] == 2 * N and stats["sizes"] == {str(N): 2}

    loaded = load(checkpoints["bert classifier"])
    model, tokenizer = loaded.model, loaded.tokenizer
    labels = [top_labels(model, tokenizer, [line], top=1)[0][0] for line in lines]
    with start(checkpoints["bert classifier"], max_batch=N, sleep=until_full) as url:
        answers = together(N, lambda i: call(url, "POST", "/classify", {"text": lines[i]}))
        assert batches(url)["sizes"] == {str(N): 1}
    assert [a[1]["classification"][0]["label"] for a in answers] == [name for name, _ in labels]
    assert [a[1]["classification"][0]["probability"] for a in answers] == pytest.approx([p for _, p in labels],
                                                                                       rel=1e-5)


def test_a_streamed_generation_adds_up_to_its_answer(servers: dict[str, str], checkpoints: dict[str, Path]) -> None:
    loaded = load(checkpoints["gpt"])
    model, tokenizer = loaded.model, loaded.tokenizer
    expected = continue_prompt(model, tokenizer, "the big", SampleConfig(temperature=0.0), max_new_tokens=15)
    got = events(servers["gpt"], "/generate", {"prompt": "the big", "max_new_tokens": 15, "temperature": 0,
                                               "stream": True})
    names = [name for name, _ in got]
    assert names[-1] == "done" and set(names[:-1]) == {"token"} and len(names) > 2
    pieces = "".join(data["text"] for name, data in got if name == "token")
    assert pieces == got[-1][1]["text"] == expected
    assert got[-1][1]["tokens"] == len(names) - 1  # a character tokenizer: one piece a token
    plain = call(servers["gpt"], "POST", "/generate", {"prompt": "the big", "max_new_tokens": 15, "temperature": 0})
    assert plain == (200, got[-1][1])


def test_a_bad_streamed_request_is_refused_before_the_stream(servers: dict[str, str]) -> None:
    status, answer = call(servers["gpt"], "POST", "/generate", {"prompt": "a", "stream": True, "top_p": 2})
    assert status == 422 and "top_p=2" in answer["error"]


@pytest.mark.parametrize("batching", ["continuous", "micro"])
def test_concurrent_streams_are_batched_and_each_is_its_own(checkpoints: dict[str, Path], batching: str) -> None:
    loaded = load(checkpoints["gpt"])
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = sentences(4, seed=8)
    alone = [continue_prompt(model, tokenizer, p, SampleConfig(temperature=0.0), max_new_tokens=10) for p in prompts]
    with start(checkpoints["gpt"], max_batch=4, sleep=until_full, max_new_tokens=20,
               generate_batching=batching) as url:
        streams = together(4, lambda i: events(url, "/generate", {"prompt": prompts[i], "max_new_tokens": 10,
                                                                   "temperature": 0, "stream": True}))
        info = call(url, "GET", "/info")[1]
    if batching == "micro":
        assert info["batches"]["sizes"] == {"4": 1} and info["continuous"] == {}
    else:  # when each joined the running batch depends on when it came; that each got its own answer does not
        assert info["batches"]["requests"] == 0 and info["continuous"]["generate"]["requests"] == 4
    for got, want in zip(streams, alone, strict=True):
        assert "".join(d["text"] for name, d in got if name == "token") == want == got[-1][1]["text"]
