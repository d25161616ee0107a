"""Answers that do not depend on the company a request keeps, and endpoints that take each other's answers:
/score gives a text bit for bit the numbers it gets alone, whatever else its batch holds (texts of other
lengths pad a batch, which moves a score's last bits); /attention takes every translation /translate makes,
one cut at the model's length included, and its own default (greedy) translation of a long source."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from serving import call, sentences, start

import tformer
from tformer.inference import load
from tformer.serve.endpoints import score
from tformer.tokenization import CharTokenizer
from tformer.training.checkpoint import save_checkpoint
from tformer.viz.attention import attention_maps

MAX_LEN = 10  # the tiny translator's context: its translations are cut there


def test_a_text_scores_the_same_alone_and_in_a_batch_of_other_lengths(checkpoints: dict[str, Path]) -> None:
    loaded = load(checkpoints["gpt"], device="cpu")
    texts = sentences(12, seed=3)  # 2 to 8 words: a batch of them is padded to the longest
    alone = [score.run(loaded, [score.ScoreWork((text,), per_token=True)])[0][0] for text in texts]
    works = [score.ScoreWork(tuple(texts[:5]), per_token=True), score.ScoreWork(tuple(texts[5:]), per_token=True)]
    together = [item for answer in score.run(loaded, works) for item in answer]
    assert together == alone  # every float equal, the per-token ones included


def test_a_text_scores_the_same_through_the_server_alone_and_among_others(checkpoints: dict[str, Path]) -> None:
    texts = sentences(8, seed=4)
    with start(checkpoints["gpt"], max_batch=8) as url:
        alone = [call(url, "POST", "/score", {"text": t})[1]["score"] for t in texts]
        status, out = call(url, "POST", "/score", {"texts": texts})
    assert status == 200 and out["scores"] == alone


@pytest.fixture(scope="module")
def short_translator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained translator with a context of MAX_LEN tokens whose run's recipe lets a translation be that
    long (max_len_a * S + max_len_b is more)."""
    torch.manual_seed(0)
    chars = CharTokenizer.train(["the cat sees a dog", "der Hund"])
    config = tformer.preset("transformer-tiny", {"d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1,
                                                 "max_len": MAX_LEN, "vocab_size": chars.vocab_size,
                                                 "pad_id": chars.pad_id, "bos_id": chars.bos_id,
                                                 "eos_id": chars.eos_id, "init": {"kind": "normal", "std": 0.5}})
    run = tmp_path_factory.mktemp("short") / "mt"
    save_checkpoint(run / "best", model=tformer.build_model(config), config=config, tokenizer=chars)
    recipe = {"task": "translation", "out_dir": str(run), "data": {"corpus": "bible"},
              "decode": {"beam": 1, "max_len_a": 2.0, "max_len_b": 10}}
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return run / "best"


def test_attention_takes_the_translation_the_server_made_at_the_length_limit(short_translator: Path) -> None:
    text = "the cat"
    with start(short_translator) as url:
        status, out = call(url, "POST", "/translate", {"text": text})
        assert status == 200
        translation = out["translation"]
        loaded = load(short_translator, device="cpu")
        assert len(loaded.tokenizer.encode(translation)) == MAX_LEN  # cut at the model's context
        for body in ({"text": text, "target": translation}, {"text": text}):  # given, and its own greedy one
            status, maps = call(url, "POST", "/attention", body)
            assert status == 200, maps
            cross = next(m for m in maps["maps"] if m["part"] == "cross")
            assert len(cross["queries"]) == MAX_LEN  # each target token, no row for an end symbol
            assert all(abs(sum(row) - 1) < 1e-5 for layer in cross["weights"] for head in layer for row in head)
        status, refused = call(url, "POST", "/attention", {"text": text, "target": translation + "a"})
    assert status == 422 and refused["error"] == (f"target is {MAX_LEN + 1} tokens; a target may have at most "
                                                  f"{MAX_LEN}, as many as a translation (the model's context "
                                                  f"max_len={MAX_LEN})")


def test_attention_maps_of_a_target_as_long_as_the_context(short_translator: Path) -> None:
    loaded = load(short_translator, device="cpu")
    target = "a" * MAX_LEN
    maps = {m.part: m for m in attention_maps(loaded.model, loaded.tokenizer, "the cat", target=target)}
    assert maps["cross"].queries == list(target) and len(maps["decoder"].queries) == MAX_LEN
    short = {m.part: m for m in attention_maps(loaded.model, loaded.tokenizer, "the cat", target="aa")}
    assert len(short["cross"].queries) == 3  # a shorter target keeps its end symbol's row
