"""Bad requests get a 4xx with one line {"error": ...} naming the value and what is allowed, never a 500:
a list of bad bodies for every endpoint (wrong JSON types, unknown fields, empty and over-long text, values out
of range, bodies that are not JSON or not objects), endpoints the model does not serve, wrong methods and
paths, and a body over the size limit. After all of them each server still answers a good request."""

from __future__ import annotations

import json

import pytest
from serving import call

LONG = "the cat " * 400  # 3,200 characters, over --max-chars 2000
NOT_OBJECTS = [b"", b"{", b"nul", b"[1, 2]", b'"text"', b"5", b"true", b"null", b"\xff\xfe{}", b'{"text": "a"}x',
               b'{"text": NaN}', b'{"text": "a", "text": 5}']
TEXT_BODIES = [  # bad as the body of /translate, /score and /classify
    {}, {"text": 5}, {"text": None, "texts": None}, {"text": ["a"]}, {"text": {"a": 1}}, {"text": True}, {"text": ""},
    {"text": "   "}, {"text": LONG}, {"text": "a\ud800b"}, {"texts": []}, {"texts": "a"}, {"texts": [1, 2]},
    {"texts": ["a", None]}, {"texts": ["ok", ""]}, {"texts": ["a"] * 17}, {"text": "a", "texts": ["b"]},
    {"text": "a", "foo": 1}, {"Text": "a"}, {"text": "the " * 300},
]
BODIES = {
    "/translate": TEXT_BODIES + [{"text": "a", **bad} for bad in (
        {"beam": 0}, {"beam": -1}, {"beam": 17}, {"beam": 2**70}, {"beam": "4"}, {"beam": 2.0}, {"beam": True},
        {"lenpen": "x"}, {"lenpen": 1e400})] + [{"text": "line one\nline two"}, {"texts": ["a", "b\r"]}],
    "/generate": [{"prompt": 5}, {"prompt": None}, {"prompt": LONG}, {"prompt": "a\udfff"}, {"prompt": "the " * 60},
                  {"text": "a"}] + [{"prompt": "a", **bad} for bad in (
        {"max_new_tokens": -1}, {"max_new_tokens": 21}, {"max_new_tokens": 2**64}, {"max_new_tokens": 1.5},
        {"max_new_tokens": "3"}, {"temperature": -1}, {"temperature": 1e-300}, {"temperature": "hot"},
        {"temperature": None}, {"top_k": 0}, {"top_k": -5}, {"top_p": 0}, {"top_p": 1.5}, {"top_p": -0.1},
        {"seed": 2**64}, {"seed": "1"}, {"stream": "yes"}, {"stream": 1}, {"stop": None},
        {"stream": True, "temperature": -1}, {"max_tokens": 5})],
    "/score": TEXT_BODIES + [{"text": "a", "per_token": "yes"}, {"text": "a", "per_token": 0}],
    "/classify": TEXT_BODIES + [{"text": "a", "top": 0}, {"text": "a", "top": -1}, {"text": "a", "top": "2"},
                                {"text": "a", "top": 1.0}],
    "/attention": [{}, {"text": ""}, {"text": 5}, {"text": LONG}, {"text": "the " * 300}, {"text": "a", "extra": 1},
                   {"text": "a\ud800"}, {"texts": ["a"]}],
}
KIND = {"/translate": "seq2seq", "/generate": "gpt", "/score": "gpt", "/classify": "bert classifier"}


def assert_refused(status: int, answer: object, *, codes: tuple[int, ...] = (404, 405, 413, 422),
                   body: object = None) -> str:
    assert status in codes, (status, answer, body)
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    message = answer["error"]
    assert message and "\n" not in message and "Traceback" not in message
    return message


def as_bytes(body: object) -> bytes:
    """JSON text of `body`, lone surrogates kept as \\u escapes (what a client can send)."""
    return json.dumps(body).encode()


@pytest.mark.parametrize("path", list(BODIES))
def test_bad_bodies_are_refused_in_one_line_and_never_with_a_500(path: str, servers: dict[str, str]) -> None:
    kinds = [KIND[path]] if path in KIND else ["seq2seq", "gpt", "bert classifier"]
    for kind in kinds:
        for body in BODIES[path]:
            status, answer = call(servers[kind], "POST", path, raw=as_bytes(body))
            assert_refused(status, answer, body=body)
        for raw in NOT_OBJECTS:
            status, answer = call(servers[kind], "POST", path, raw=raw)
            assert_refused(status, answer)
        assert call(servers[kind], "GET", "/health") == (200, {"status": "ok"})


@pytest.mark.parametrize("body, words", [
    ({"text": 5}, ["text=5", "valid string"]),
    ({"text": "a", "foo": 1}, ["unknown field 'foo'", "text, texts, n_best, prefix, beam, lenpen"]),
    ({"Text": "a"}, ["unknown field 'Text'"]),
    ({}, ["give either text", "or texts"]),
    ({"text": ""}, ["text is empty"]),
    ({"text": "  "}, ["text is only whitespace"]),
    ({"text": LONG}, ["3200 characters", "at most 2000", "--max-chars"]),
    ({"text": "the " * 300}, ["tokens", "at most 48", "max_len=48"]),
    ({"texts": ["a"] * 17}, ["17 strings", "at most 16", "--max-batch"]),
    ({"texts": ["a", 3]}, ["texts[1]=3", "valid string"]),
    ({"text": "a", "beam": 0}, ["beam=0 must be at least 1 (1 = greedy)"]),
    ({"text": "a", "beam": 17}, ["beam=17 is not allowed; give 1 (greedy) to 16 (this server's most)"]),
    ({"text": "a", "beam": "4"}, ["beam='4'", "valid integer"]),
    ({"text": "a\ud800"}, ["not valid JSON", "column 18"]),  # a lone surrogate is no character
    ({"text": "a\nb"}, ["line break"]),
])
def test_translate_messages_name_the_value_and_what_is_allowed(body: dict, words: list[str],
                                                                servers: dict[str, str]) -> None:
    message = assert_refused(*call(servers["seq2seq"], "POST", "/translate", raw=as_bytes(body)), codes=(422,))
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("body, words", [
    ({"prompt": "a", "temperature": -1}, ["temperature=-1", ">= 0"]),
    ({"prompt": "a", "temperature": 1e-300}, ["temperature=1e-300", "at least 0.001"]),
    ({"prompt": "a", "top_p": 1.5}, ["top_p=1.5", "(0, 1]"]),
    ({"prompt": "a", "seed": 2**64}, ["seed=", "2**64 - 1"]),
    ({"prompt": "a", "seed": -1}, ["seed=-1", "[0, 2**64 - 1]"]),  # the CLI's range too (issue 31, class 3)
    ({"prompt": "a", "top_k": 10**30}, ["top_k=1000000000000000000000000000000", "[1, 2**63 - 1]"]),
    ({"prompt": "a", "max_new_tokens": 21}, ["max_new_tokens=21", "0 to 20", "--max-new-tokens"]),
    ({"prompt": "the " * 60}, ["prompt is", "tokens", "max_len=48"]),
])
def test_generate_messages_name_the_value_and_what_is_allowed(body: dict, words: list[str],
                                                               servers: dict[str, str]) -> None:
    message = assert_refused(*call(servers["gpt"], "POST", "/generate", body), codes=(422,))
    for word in words:
        assert word in message, message


def test_the_wrong_endpoint_for_the_model_names_the_ones_it_has(servers: dict[str, str]) -> None:
    message = assert_refused(*call(servers["seq2seq"], "POST", "/generate", {"prompt": "a"}), codes=(404,))
    assert "/generate is not served for this seq2seq checkpoint" in message and "/translate, /attention" in message
    message = assert_refused(*call(servers["gpt"], "POST", "/translate", {"text": "a"}), codes=(404,))
    assert "/generate, /score, /attention" in message
    message = assert_refused(*call(servers["bert"], "POST", "/classify", {"text": "a"}), codes=(404,))
    assert "bert checkpoint" in message
    # the endpoint is checked before the body: a bad body to the wrong endpoint is still "wrong endpoint"
    assert call(servers["bert classifier"], "POST", "/score", raw=b"{")[0] == 404


def test_unknown_paths_and_wrong_methods(servers: dict[str, str]) -> None:
    message = assert_refused(*call(servers["seq2seq"], "GET", "/nope"), codes=(404,))
    assert "no endpoint /nope" in message and "POST /translate" in message
    message = assert_refused(*call(servers["seq2seq"], "GET", "/translate"), codes=(405,))
    assert message == "GET /translate is not allowed; use POST /translate"
    assert_refused(*call(servers["seq2seq"], "DELETE", "/health"), codes=(405,))
    assert_refused(*call(servers["gpt"], "PUT", "/generate", {"prompt": "a"}), codes=(405,))


def test_a_body_over_the_limit_is_refused_unread(servers: dict[str, str]) -> None:
    huge = b'{"text": "' + b"a" * 400_000 + b'"}'
    message = assert_refused(*call(servers["seq2seq"], "POST", "/translate", raw=huge), codes=(413,))
    assert "this server reads at most" in message

