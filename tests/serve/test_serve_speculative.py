"""A server with a draft model (`tformer serve --draft`): /generate decodes a generation that has a call of its
own speculatively (the same greedy text as without the draft), decodes rows batched together as without
it, and says in /info which draft it holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from serving import TINY, WIDE

import tformer
import tformer.decoding.search as search
from tformer.decoding.speculative import speculative_generate
from tformer.serve import Limits
from tformer.serve.endpoints import generate, load_service, run_batch
from tformer.serve.service import Service
from tformer.tokenization import load_tokenizer
from tformer.training.checkpoint import save_checkpoint


@pytest.fixture(scope="module")
def two(checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Service, Service]:
    """The GPT served without a draft and with a one-layer draft of its tokenizer (3 tokens a round)."""
    tokenizer = load_tokenizer(checkpoints["gpt"])
    torch.manual_seed(1)
    config = tformer.preset("gpt-tiny", {**TINY, "n_layers": 1, "vocab_size": tokenizer.vocab_size,
                                         "bos_id": tokenizer.eos_id, "eos_id": tokenizer.eos_id, "init": WIDE})
    draft = tmp_path_factory.mktemp("draft") / "draft"
    save_checkpoint(draft, model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    limits = Limits(max_new_tokens=20)
    return (load_service(checkpoints["gpt"], limits=limits, device="cpu"),
            load_service(checkpoints["gpt"], limits=limits, device="cpu", draft=draft, draft_tokens=3))


def greedy(service: Service, prompt: str) -> object:
    return generate.prepare(service, prompt=prompt, max_new_tokens=12, temperature=0.0, top_k=None, top_p=None,
                            seed=None, stop=False).work


def test_a_generation_alone_is_decoded_speculatively_and_rows_together_are_not(
        two: tuple[Service, Service], monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    plain, drafted = two
    calls: list[int] = []

    def counted(*args: object, **kwargs: object) -> list[list[int]]:
        calls.append(len(args[2]))
        return speculative_generate(*args, **kwargs)

    monkeypatch.setattr(search, "speculative_generate", counted)
    prompts = ["the cat", "a big red dog sees"]
    alone = [run_batch(plain.loaded, [greedy(plain, p)]) for p in prompts]
    assert calls == []
    assert [run_batch(drafted.loaded, [greedy(drafted, p)]) for p in prompts] == alone
    assert calls == [1, 1]
    together = run_batch(drafted.loaded, [greedy(drafted, p) for p in prompts])
    assert together == [a[0] for a in alone] and calls == [1, 1]


def test_info_names_the_draft(two: tuple[Service, Service]) -> None:
    plain, drafted = two
    assert "draft" not in plain.info()
    assert drafted.info()["draft"] == {"checkpoint": drafted.loaded.draft.path, "draft_tokens": 3}
