"""`tformer serve`'s HTTP API through real uvicorn servers on 127.0.0.1, one per kind of checkpoint: each
endpoint's answer is what the library gives for the same input (the translator's decoding settings come from
its run's recipe.yaml), /info describes the model, and the page is served with a policy that allows no
inline script."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from serving import LABELS, call, sentences

from tformer.decoding import SampleConfig
from tformer.inference import DecodeConfig, continue_prompt, load, score_lines, top_labels, translate


@pytest.fixture(scope="module")
def loaded(checkpoints: dict[str, Path]) -> dict[str, tuple]:
    return {kind: (m.model, m.config, m.tokenizer) for kind, m in ((k, load(p)) for k, p in checkpoints.items())}


def test_health_and_info(servers: dict[str, str]) -> None:
    assert call(servers["gpt"], "GET", "/health") == (200, {"status": "ok"})
    status, info = call(servers["seq2seq"], "GET", "/info")
    assert status == 200
    assert (info["family"], info["kind"], info["model"]) == ("seq2seq", "seq2seq", "EncoderDecoder")
    assert call(servers["bert classifier"], "GET", "/info")[1]["family"] == "bert"
    assert info["sizes"]["d_model"] == 32 and info["sizes"]["n_layers"] == 2 and info["sizes"]["parameters"] > 0
    assert info["endpoints"] == ["translate", "attention"]
    assert info["decode"]["beam"] == 2  # from the run's recipe.yaml
    assert info["limits"]["max_batch"] == 16 and info["limits"]["max_chars"] == 2000
    assert set(info["batches"]) >= {"batches", "requests", "largest", "sizes"}
    endpoints = {kind: call(url, "GET", "/info")[1]["endpoints"] for kind, url in servers.items()}
    assert endpoints == {"seq2seq": ["translate", "attention"], "gpt": ["generate", "score", "attention"],
                         "bert classifier": ["classify", "attention"], "bert": ["attention"],
                         "hf gpt": ["generate", "score", "attention"]}


def test_translate_is_the_library_translation(servers: dict[str, str], loaded: dict) -> None:
    model, _, tokenizer = loaded["seq2seq"]
    texts = sentences(5)
    expected = translate(model, tokenizer, texts, DecodeConfig(beam=2, max_len_b=6, max_len_a=1.0))
    assert len(set(expected)) > 1  # the model's output depends on its input
    assert [call(servers["seq2seq"], "POST", "/translate", {"text": t})[1]["translation"] for t in texts] == expected
    assert call(servers["seq2seq"], "POST", "/translate", {"texts": texts}) == (200, {"translations": expected})
    greedy = translate(model, tokenizer, texts[:1], DecodeConfig(beam=1, max_len_b=6, max_len_a=1.0))
    assert call(servers["seq2seq"], "POST", "/translate", {"text": texts[0], "beam": 1}) == \
        (200, {"translation": greedy[0]})


@pytest.mark.parametrize("kind", ["gpt", "hf gpt"])
def test_generate_is_the_library_continuation(kind: str, servers: dict[str, str], loaded: dict) -> None:
    model, _, tokenizer = loaded[kind]
    for prompt, settings in [("the cat", {"temperature": 0.0}), ("a dog", {"temperature": 0.9, "top_k": 5, "seed": 3}),
                             ("", {"temperature": 0.0})]:
        expected = continue_prompt(model, tokenizer, prompt, SampleConfig(**settings), max_new_tokens=12)
        status, out = call(servers[kind], "POST", "/generate", {"prompt": prompt, "max_new_tokens": 12, **settings})
        assert status == 200 and out["text"] == expected
        assert out["tokens"] <= 12 and out["finish"] in ("stop", "length")
    status, out = call(servers[kind], "POST", "/generate", {"prompt": "the", "max_new_tokens": 0})
    assert (status, out["text"], out["tokens"]) == (200, "", 0)


def test_generate_default_length_is_the_server_limit(servers: dict[str, str]) -> None:
    status, out = call(servers["gpt"], "POST", "/generate", {"prompt": "the", "temperature": 0.0, "stop": False})
    assert (status, out["tokens"], out["finish"]) == (200, 20, "length")  # the server's --max-new-tokens 20


def test_score_is_the_library_score(servers: dict[str, str], loaded: dict) -> None:
    model, _, tokenizer = loaded["gpt"]
    texts = sentences(3)
    expected = score_lines(model, tokenizer, texts)
    status, out = call(servers["gpt"], "POST", "/score", {"texts": texts})
    assert status == 200 and len(out["scores"]) == 3
    for got, want, text in zip(out["scores"], expected, texts, strict=True):
        assert got["log_prob"] == pytest.approx(want.log_prob, rel=1e-5)
        assert got["tokens"] == want.n_tokens == len(text)  # characters, after the start token
        assert got["perplexity"] == pytest.approx(math.exp(-want.log_prob / want.n_tokens), rel=1e-5)
        assert got["bits_per_token"] == pytest.approx(-want.log_prob / math.log(2) / want.n_tokens, rel=1e-5)
        assert got["bits_per_char"] == pytest.approx(want.bits_per_char, rel=1e-5)
        assert [t for t, _ in got["token_log_probs"]] == list(text)
        assert sum(lp for _, lp in got["token_log_probs"]) == pytest.approx(want.log_prob, rel=1e-5)
    status, one = call(servers["gpt"], "POST", "/score", {"text": texts[0], "per_token": False})
    assert status == 200 and "token_log_probs" not in one["score"]
    assert one["score"]["log_prob"] == pytest.approx(expected[0].log_prob, rel=1e-5)


def test_classify_is_the_library_labels(servers: dict[str, str], loaded: dict) -> None:
    model, _, tokenizer = loaded["bert classifier"]
    texts = sentences(4)
    expected = top_labels(model, tokenizer, texts, top=2)
    status, out = call(servers["bert classifier"], "POST", "/classify", {"texts": texts, "top": 2})
    assert status == 200
    for got, want in zip(out["classifications"], expected, strict=True):
        assert [g["label"] for g in got] == [name for name, _ in want]
        assert [g["probability"] for g in got] == pytest.approx([p for _, p in want], rel=1e-5)
    status, out = call(servers["bert classifier"], "POST", "/classify", {"text": texts[0], "top": 10})
    assert status == 200 and sorted(g["label"] for g in out["classification"]) == sorted(LABELS)  # all there are
    assert sum(g["probability"] for g in out["classification"]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("kind, parts", [("seq2seq", ["encoder", "decoder", "cross"]), ("gpt", ["decoder"]),
                                         ("bert classifier", ["encoder"]), ("bert", ["encoder"])])
def test_attention_maps_are_distributions_over_the_tokens(kind: str, parts: list[str],
                                                          servers: dict[str, str]) -> None:
    status, out = call(servers[kind], "POST", "/attention", {"text": "the big cat"})
    assert status == 200 and [m["part"] for m in out["maps"]] == parts
    for m in out["maps"]:
        weights = torch.tensor(m["weights"])  # (L, H, Tq, Tk)
        assert weights.shape == (2, 4, len(m["queries"]), len(m["keys"]))
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-3)
    if kind == "seq2seq":
        source = out["maps"][0]["keys"]
        assert out["maps"][2]["keys"] == source and len(source) >= 3
        status, aligned = call(servers[kind], "POST", "/attention", {"text": "the big cat", "target": "the cat"})
        assert status == 200 and len(aligned["maps"][2]["queries"]) == len(aligned["maps"][1]["queries"])


def test_the_page_is_served_with_its_script_and_no_inline_code(servers: dict[str, str]) -> None:
    status, page = call(servers["seq2seq"], "GET", "/")
    assert status == 200 and '<script src="/static/app.js"' in page and "<script>" not in page
    status, script = call(servers["seq2seq"], "GET", "/static/app.js")
    assert status == 200 and "textContent" in script and "innerHTML" not in script
    assert call(servers["seq2seq"], "GET", "/static/style.css")[0] == 200
    assert call(servers["seq2seq"], "GET", "/static/../../etc/passwd")[0] == 404


def test_the_page_forbids_inline_script(servers: dict[str, str]) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(servers["gpt"])
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/")
    response = connection.getresponse()
    response.read()
    policy = response.getheader("Content-Security-Policy")
    connection.close()
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy


def test_a_half_precision_server_answers_as_the_library_does_in_that_dtype(checkpoints: dict[str, Path]) -> None:
    """`tformer serve --dtype bfloat16`: the model runs in bfloat16, and /translate, /generate and /classify
    give what the library gives with the checkpoint loaded in bfloat16."""
    from tformer.serve import Limits
    from tformer.serve.app import create_app
    from tformer.serve.endpoints import load_service
    from tformer.serve.server import ServerThread

    texts = sentences(3)
    for kind, path, body in [("seq2seq", "/translate", {"texts": texts}),
                             ("gpt", "/generate", {"prompt": "the", "temperature": 0.0, "max_new_tokens": 6}),
                             ("bert classifier", "/classify", {"texts": texts})]:
        service = load_service(checkpoints[kind], limits=Limits(batch_wait_ms=0.0), device="cpu", dtype="bfloat16")
        assert {p.dtype for p in service.model.parameters()} == {torch.bfloat16}
        loaded = load(checkpoints[kind], dtype="bfloat16")
        model, tokenizer = loaded.model, loaded.tokenizer
        with ServerThread(create_app(service)) as url:
            status, out = call(url, "POST", path, body)
        assert status == 200, out
        if kind == "seq2seq":
            assert out["translations"] == translate(model, tokenizer, texts,
                                                    DecodeConfig(beam=2, max_len_b=6, max_len_a=1.0))
        elif kind == "gpt":
            assert out["text"] == continue_prompt(model, tokenizer, "the", SampleConfig(temperature=0.0),
                                                  max_new_tokens=6)
        else:
            want = top_labels(model, tokenizer, texts)
            assert [[g["label"] for g in got] for got in out["classifications"]] == [[n for n, _ in w] for w in want]
