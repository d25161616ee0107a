"""A fault of the server is a 500 with its traceback in the log; a UserError raised while a batch decodes is
the client's 422 (issue 31: only what the user can fix is blamed on the user)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from serving import call, start

from tformer.errors import UserError


def raising(error: Exception) -> Any:
    def run_batch(loaded: Any, works: Any) -> Any:
        raise error

    return run_batch


@pytest.mark.parametrize("batching", ["micro", "continuous"])
def test_a_bug_while_decoding_is_a_500_with_the_traceback_logged(
        checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        batching: str) -> None:
    bug = IndexError("index 7 is out of bounds")
    if batching == "micro":
        monkeypatch.setattr("tformer.serve.app.run_batch", raising(bug))
    else:  # a fault of the running batch's step
        def step(self: Any) -> None:
            raise bug

        monkeypatch.setattr("tformer.decoding.continuous.Running.step", step)
    with caplog.at_level(logging.ERROR, logger="tformer.serve"), start(checkpoints["gpt"],
                                                                        generate_batching=batching) as url:
        status, answer = call(url, "POST", "/generate", {"prompt": "In", "max_new_tokens": 2})
    assert status == 500
    assert answer == {"error": "internal error (IndexError: index 7 is out of bounds)"}
    logged = [r for r in caplog.records if r.name == "tformer.serve"]
    assert logged and logged[0].exc_info is not None and logged[0].exc_info[0] is IndexError


def test_a_plain_value_error_is_not_blamed_on_the_client(checkpoints: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tformer.serve.app.run_batch", raising(ValueError("shape mismatch inside")))
    with start(checkpoints["gpt"]) as url:
        status, answer = call(url, "POST", "/score", {"text": "In the"})
    assert (status, answer) == (500, {"error": "internal error (ValueError: shape mismatch inside)"})


def test_a_user_error_while_decoding_is_the_clients_422(checkpoints: dict[str, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tformer.serve.app.run_batch", raising(UserError("text=x cannot be decoded here")))
    with start(checkpoints["gpt"]) as url:
        status, answer = call(url, "POST", "/score", {"text": "In the"})
    assert (status, answer) == (422, {"error": "text=x cannot be decoded here"})
