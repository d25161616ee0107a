"""The serve tests' fixtures: `checkpoints` (built once a session by `serving.build`) and `servers`, one real
uvicorn server per checkpoint kind for the session (kind -> URL). The helpers are in serving.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import build, start


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="session")
def servers(checkpoints: dict[str, Path]) -> Iterator[dict[str, str]]:
    """One server per checkpoint kind, for the whole session: kind -> URL."""
    with start(checkpoints["seq2seq"]) as mt, start(checkpoints["gpt"], max_new_tokens=20) as gpt, \
            start(checkpoints["bert classifier"]) as clf, start(checkpoints["bert"]) as bert, \
            start(checkpoints["hf gpt"], max_new_tokens=20) as hf:
        yield {"seq2seq": mt, "gpt": gpt, "bert classifier": clf, "bert": bert, "hf gpt": hf}
