"""Requests to every endpoint of `tformer serve`, by property (Hypothesis): JSON bodies of right and wrong
types, missing and extra keys, huge numbers, lone surrogates (escaped, or as bytes no UTF-8 has), byte-order
marks, empty strings, nested objects, and broken bodies, mostly to a server that serves the endpoint. The
contract (`tests/properties/contracts.check_request`): a 4xx answered {"error": one line}, or a 200 whose answer
is the library's for the same input (the translator's decoding settings from its recipe.yaml, the server's
--max-new-tokens); never a 5xx. `python -m benchmarks.fuzz` runs the same property with many more examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.properties.contracts import ENDPOINTS, Library, check_request, post, requests_for

FEW = settings(max_examples=80, deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module")
def library(checkpoints: dict[str, Path]) -> Library:
    return Library.of(checkpoints, max_new_tokens={"gpt": 20, "hf gpt": 20})  # as conftest's servers


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_any_body_is_answered_in_one_line_or_as_the_library_does(endpoint: str, servers: dict[str, str],
                                                                  library: Library) -> None:
    @FEW
    @given(requests_for(endpoint))
    def request(sent: tuple[str, bytes]) -> None:
        kind, raw = sent
        check_request(servers, library, kind, endpoint, raw)

    request()


@pytest.mark.parametrize("lenpen", [-9223372036854775809, 1e308, 1000])
def test_a_length_penalty_far_from_zero_is_refused_not_a_500(lenpen: float, servers: dict[str, str],
                                                             library: Library) -> None:
    """What the property found: beam search divided by len ** lenpen, 0.0 or an OverflowError (a 500)."""
    body = json.dumps({"text": "the red cat", "lenpen": lenpen}).encode()
    assert check_request(servers, library, "seq2seq", "translate", body) == "422"
    status, _, text = post(servers["seq2seq"], "/translate", body)
    assert status == 422 and "lenpen=" in text and "must be in [-10, 10]" in text
