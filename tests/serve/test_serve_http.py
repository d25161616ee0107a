"""What the server makes of a request before its values (issue 31, class 3): strict JSON (a key given twice,
at any depth, and NaN, Infinity, -Infinity are refused in one line, not read with the last key winning); HEAD
of /, /health and /info answered as GET without a body; a path with a trailing slash a 404 that names the
endpoints, never a redirect; and /attention's weights exactly the library's, every row summing to 1, its
encoder map the one `tformer plot attention` draws (one word's row, as `--query` prints it)."""

from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import torch
from serving import call, start
from test_serve_errors import assert_refused

from tformer.cli import main
from tformer.inference import load
from tformer.viz import attention

BODIES = {"/translate": ("seq2seq", {"text": "the cat"}), "/generate": ("gpt", {"prompt": "the cat"}),
          "/score": ("gpt", {"text": "the cat"}), "/classify": ("bert classifier", {"text": "the cat"}),
          "/attention": ("gpt", {"text": "the cat"})}


@pytest.mark.parametrize("raw, key", [
    (b'{"temperature": 0, "prompt": "a", "temperature": 1000}', "temperature"),
    (b'{"prompt": "a", "prompt": "b"}', "prompt"),
    (b'{"prompt": "a", "stop": true, "stop": true}', "stop"),  # even with equal values
    (b'{"prompt": "a", "x": {"y": 1, "y": 2}}', "y"),  # at any depth, before the unknown field
    (b'{"prompt": "a", "x": [1, {"z": [{"w": 1, "w": 1}]}]}', "w"),
], ids=["last-would-win", "prompt", "equal-values", "in-an-object", "in-a-list"])
def test_a_key_given_twice_is_refused_naming_it(raw: bytes, key: str, servers: dict[str, str]) -> None:
    message = assert_refused(*call(servers["gpt"], "POST", "/generate", raw=raw), codes=(422,))
    assert message == f"the body repeats the key {key!r}; give each key once"


@pytest.mark.parametrize("path", list(BODIES))
def test_every_endpoint_refuses_a_repeated_key(path: str, servers: dict[str, str]) -> None:
    kind, body = BODIES[path]
    field = next(iter(body))
    raw = f'{{"{field}": "the cat", "{field}": "the dog"}}'.encode()
    message = assert_refused(*call(servers[kind], "POST", path, raw=raw), codes=(422,))
    assert message == f"the body repeats the key '{field}'; give each key once"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("path, field", [("/generate", "temperature"), ("/generate", "top_p"),
                                         ("/generate", "prompt"), ("/translate", "lenpen")])
def test_nan_and_infinity_are_not_json(constant: str, path: str, field: str, servers: dict[str, str]) -> None:
    kind, body = BODIES[path]
    raw = f'{{"{next(iter(body))}": "the cat", "{field}": {constant}}}'.encode()
    if field == next(iter(body)):
        raw = f'{{"{field}": {constant}}}'.encode()
    message = assert_refused(*call(servers[kind], "POST", path, raw=raw), codes=(422,))
    assert message == f"the body holds {constant}, which is not JSON; give a finite number"


def test_a_number_that_overflows_is_no_number(servers: dict[str, str]) -> None:
    message = assert_refused(*call(servers["gpt"], "POST", "/generate", raw=b'{"temperature": 1e400}'), codes=(422,))
    assert message == "temperature=inf is not allowed: input should be a finite number"


def test_a_body_that_is_not_json_is_still_named_by_its_syntax(servers: dict[str, str]) -> None:
    """The strict reading leaves JSON that does not parse to pydantic's message, which says where."""
    for raw, words in [(b"{", "EOF while parsing"), (b'{"prompt": "a",}', "trailing comma"),
                       (b"[" * 100_000, "recursion limit"), (b'{"prompt": "\xff"}', "not valid JSON")]:
        message = assert_refused(*call(servers["gpt"], "POST", "/generate", raw=raw), codes=(422,))
        assert "not valid JSON" in message and words in message, message


def request(url: str, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body bytes) of one request without a body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/", "/health", "/info", "/static/app.js", "/static/style.css"])
def test_head_is_get_without_the_body(path: str, servers: dict[str, str]) -> None:
    url = servers["seq2seq"]
    got_status, got_headers, got_body = request(url, "GET", path)
    status, headers, body = request(url, "HEAD", path)
    assert (status, body) == (200, b"") and got_status == 200 and got_body
    assert headers["content-type"] == got_headers["content-type"]
    if path != "/info":  # /info counts the batches so far, so its length may change between the two
        assert headers["content-length"] == got_headers["content-length"] == str(len(got_body))


@pytest.mark.parametrize("kind", ["seq2seq", "gpt", "bert classifier", "bert"])
def test_a_trailing_slash_is_a_404_naming_the_endpoint_never_a_redirect(kind: str, servers: dict[str, str]) -> None:
    url = servers[kind]
    served = call(url, "GET", "/info")[1]["endpoints"]
    paths = [("GET", "/health"), ("GET", "/info")] + [("POST", f"/{e}") for e in served]
    for method, path in paths:
        for slashed in (path + "/", path + "//"):
            status, answer = call(url, method, slashed, {"text": "the cat"} if method == "POST" else None)
            message = assert_refused(status, answer, codes=(404,))
            assert message.startswith(f"no endpoint {slashed} (without the trailing slash: {method} {path}); "
                                      "this server has GET /, GET /health, GET /info"), message
            assert request(url, "HEAD", slashed)[0] == 404
    unlisted = [f"/{e}/" for e in {"translate", "generate", "score", "classify", "attention"} - set(served)]
    for path in ["/static/app.js/", "/static/style.css/", *unlisted]:  # not in the list of endpoints: no hint
        message = assert_refused(*call(url, "POST" if path in unlisted else "GET", path), codes=(404,))
        assert message.startswith(f"no endpoint {path}; this server has"), message


@pytest.mark.parametrize("kind", ["seq2seq", "gpt", "bert classifier", "bert", "hf gpt"])
def test_attention_weights_are_the_librarys_and_every_row_sums_to_one(kind: str, servers: dict[str, str],
                                                                       checkpoints: dict[str, Path]) -> None:
    loaded = load(checkpoints[kind])
    for text in ["the big cat", "the big red dog sees a small blue house"]:  # 39 characters: a GPT's 47 at most
        status, out = call(servers[kind], "POST", "/attention", {"text": text})
        assert status == 200, out
        expected = attention.attention_maps(loaded.model, loaded.tokenizer, text)
        assert [m["part"] for m in out["maps"]] == [m.part for m in expected]
        for got, want in zip(out["maps"], expected, strict=True):
            assert (got["queries"], got["keys"]) == (want.queries, want.keys)
            weights = torch.tensor(got["weights"], dtype=torch.float64)  # (L, H, Tq, Tk)
            assert torch.equal(weights.float(), want.weights)  # float32 values, unrounded
            assert (weights.sum(-1) - 1).abs().max() <= 1e-6


def test_the_encoder_map_is_the_one_plot_attention_draws(checkpoints: dict[str, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """The translator's encoder map from /attention gives, for one word, the row that `tformer plot attention
    --query` prints: the mean of the word's token rows, summed over each key word's tokens, in every layer and
    head (the table's three decimals)."""
    sentence, word = "the big cat sees the small dog", "cat"
    with start(checkpoints["seq2seq"]) as url:
        status, out = call(url, "POST", "/attention", {"text": sentence})
    assert status == 200, out
    encoder = out["maps"][0]
    assert encoder["part"] == "encoder"
    served = torch.tensor(encoder["weights"], dtype=torch.float64)  # (L, H, S, S)
    assert main(["plot", "attention", "--checkpoint", str(checkpoints["seq2seq"]), "--text", sentence,
                 "--query", word, "--out", str(tmp_path / "cat.png")]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("layer head"))
    tokenizer = load(checkpoints["seq2seq"]).tokenizer
    source = attention.words(tokenizer, tokenizer.encode(sentence))
    assert lines[at].split()[2:] == [w.text for w in source]
    mine = next(w for w in source if w.text == word).tokens
    row = served[:, :, list(mine)].mean(dim=2)  # (L, H, S)
    expected = torch.stack([row[..., list(w.tokens)].sum(-1) for w in source], dim=-1)  # (L, H, words)
    printed = lines[at + 1:]
    assert len(printed) == served.shape[0] * served.shape[1]
    for line in printed:
        layer, head, *values = line.split()
        assert [float(v) for v in values] == pytest.approx(expected[int(layer), int(head)].tolist(), abs=5e-4)
