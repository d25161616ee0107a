"""`tformer generate --draft`: speculative decoding from the command line writes the target's own greedy text,
prints the draft's acceptance rate (on stderr, or in each --json object), and draws reproducible samples; the
library's `continue_prompt` and `sample_prompts` with a draft, and `inference.load_draft`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tformer
from tformer.cli import main
from tformer.inference import continue_prompt, load, load_draft, sample_prompts, with_given
from tformer.inference.generate import DEFAULT
from tformer.tokenization.char import CharTokenizer
from tformer.training.checkpoint import save_checkpoint

TEXT = ["In the beginning God created the heavens and the earth.", "And the earth was waste and void."]
WIDE = {"kind": "normal", "std": 0.5}  # untrained weights whose outputs depend on the input


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A two-layer target GPT and a one-layer draft, the same character tokenizer."""
    root = tmp_path_factory.mktemp("speculative")
    tokenizer = CharTokenizer.train(TEXT)
    for name, layers, seed in (("target", 2, 0), ("draft", 1, 1)):
        torch.manual_seed(seed)
        config = tformer.preset("gpt-tiny", {"vocab_size": tokenizer.vocab_size, "max_len": 64, "n_layers": layers,
                                             "bos_id": tokenizer.eos_id, "eos_id": tokenizer.eos_id, "init": WIDE})
        save_checkpoint(root / name, model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return root / "target", root / "draft"


def generate(target: Path, *extra: str) -> list[str]:
    return ["generate", "--checkpoint", str(target), "--prompt", "And the", "--max-new-tokens", "24", "--no-stop",
            "--device", "cpu", *extra]


@pytest.mark.parametrize("k", ["1", "4"])
def test_greedy_text_is_the_targets_and_the_acceptance_rate_is_printed(pair: tuple[Path, Path], k: str,
                                                                       capsys: pytest.CaptureFixture,
                                                                       one_thread: None) -> None:
    target, draft = pair
    assert main(generate(target, "--temperature", "0")) == 0
    alone = capsys.readouterr()
    assert main(generate(target, "--temperature", "0", "--draft", str(draft), "--draft-tokens", k)) == 0
    out, err = capsys.readouterr()
    assert out == alone.out and alone.err == ""
    assert err.startswith("tformer generate: draft acceptance rate ") and err.count("\n") == 1, err
    assert "of 24 tokens" not in err and "24 tokens in" in err


def test_json_holds_the_acceptance_rate(pair: tuple[Path, Path], capsys: pytest.CaptureFixture,
                                        one_thread: None) -> None:
    target, draft = pair
    argv = generate(target, "--temperature", "0", "--json", "-n", "2")
    assert main([*argv, "--draft", str(target)]) == 0  # its own draft accepts all: 4 rounds of 4 + 1, then 3 + 1
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert err == "" and len(rows) == 2
    for row in rows:
        assert row["speculative"] == {"proposed": 19, "accepted": 19, "acceptance_rate": 1.0, "rounds": 5,
                                      "tokens": 24}
    assert main(argv) == 0
    assert [{k: v for k, v in r.items() if k != "speculative"} for r in rows] == \
        [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_seeded_speculative_sample_is_reproducible(pair: tuple[Path, Path], capsys: pytest.CaptureFixture,
                                                     one_thread: None) -> None:
    target, draft = pair
    argv = generate(target, "--temperature", "0.9", "--top-p", "0.9", "--seed", "5", "--draft", str(draft))
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first and first.startswith("And the")


def test_the_library_continues_with_a_draft(pair: tuple[Path, Path], one_thread: None) -> None:
    target, draft_path = pair
    loaded = load(target)
    draft = load_draft(draft_path, loaded, tokens=3)
    assert draft.tokens == 3 and draft.path == str(draft_path)
    greedy = with_given(DEFAULT, temperature=0.0, stop=False)
    alone = continue_prompt(loaded.decoder, loaded.tokenizer, "In the", greedy, max_new_tokens=20)
    assert continue_prompt(loaded.decoder, loaded.tokenizer, "In the", greedy, max_new_tokens=20,
                           draft=draft) == alone
    samples = list(sample_prompts(loaded.decoder, loaded.tokenizer, ["In the", "And"], greedy, max_new_tokens=20,
                                  draft=draft))
    assert samples[0].text == alone and all(s.stats.tokens == 20 and s.stats.proposed > 0 for s in samples)
    assert all(s.stats is None for s in sample_prompts(loaded.decoder, loaded.tokenizer, ["In"], greedy,
                                                       max_new_tokens=2))


def test_the_draft_recipe_is_distilled_from_gpt_bible_with_its_data_and_context() -> None:
    from tformer.tasks import load_recipe

    target, draft = load_recipe("gpt-bible"), load_recipe("gpt-bible-draft")
    assert draft.distill.teacher == f"{target.out_dir}/best" and draft.train.best_metric == "agreement"
    assert draft.data == target.data  # the same text; the tokenizer is the teacher's
    assert draft.model.overrides["max_len"] == target.model.overrides["max_len"]
    assert draft.model.overrides["n_layers"] < target.model.overrides["n_layers"]
    assert draft.model.overrides["d_model"] < target.model.overrides["d_model"]
