"""benchmarks/translate_baseline.py at tiny scale: the nn.Transformer wrapper has our model's sizes and
decodes through tformer's greedy; the script trains it on a run's job and compares both."""

import importlib.util
import json
import random
import types
from pathlib import Path

import pytest
import torch
import yaml

import tformer
from tformer.cli import main as tformer_main
from tformer.decoding import greedy

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "translate_baseline.py"
D = 32


def load_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("translate_baseline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


baseline = load_script()

WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft".split(), strict=True))


def corpus(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    words = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    path.write_text("".join(" ".join(w) + "\t" + " ".join(GERMAN[x] for x in w) + "\n" for w in words))


def tiny_config(**overrides: object) -> tformer.Seq2SeqConfig:
    return tformer.Seq2SeqConfig(vocab_size=40, d_model=D, n_heads=4, d_ff=64, n_layers=2, n_decoder_layers=1,
                                 max_len=32, **overrides)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_same_sizes_as_ours_but_the_final_norms(placement: str) -> None:
    config = tiny_config(norm=tformer.config.NormConfig(placement=placement))
    ours, theirs = tformer.build_model(config), baseline.TorchBaseline(config)
    extra = 0 if config.norm.final else 2 * 2 * D  # nn.Transformer's final encoder and decoder LayerNorms
    assert baseline.n_parameters(theirs) - baseline.n_parameters(ours) == extra
    assert theirs.lm_head.weight is theirs.tokens.weight


def test_decode_is_causal_ignores_source_padding_and_greedy_runs() -> None:
    model = baseline.TorchBaseline(tiny_config()).eval()
    src, tgt = torch.randint(3, 40, (2, 7)), torch.randint(3, 40, (2, 6))
    src[1, 4:] = 0
    with torch.no_grad():  # the training path, not the nested-tensor fast path of inference mode
        logits = model(src, tgt)
        changed = tgt.clone()
        changed[:, 4:] = 5
        assert torch.allclose(model(src, changed)[:, :4], logits[:, :4], atol=1e-5)
        alone = model(src[1:, :4], tgt[1:])
        assert (alone - logits[1:]).abs().max() <= 1e-5
    assert greedy(model, src, use_cache=True) == greedy(model, src, use_cache=False)  # no cache: same path
    with pytest.raises(ValueError, match="no KV cache"):
        model.decode(tgt, model.encode(src), src != 0, offset=3)


def test_unsupported_parts_are_named() -> None:
    config = tiny_config(activation="swiglu", positions=tformer.config.PositionConfig(kind="rope"))
    with pytest.raises(ValueError, match="activation='swiglu'.*positions.kind='rope'"):
        baseline.TorchBaseline(config)


def test_script_trains_the_baseline_and_compares(tmp_path, capsys) -> None:  # noqa: ANN001
    corpus(tmp_path / "train.tsv", 120, 0)
    corpus(tmp_path / "valid.tsv", 10, 1)
    corpus(tmp_path / "test.tsv", 10, 2)
    recipe = {
        "task": "translation", "out_dir": str(tmp_path / "run"),
        "data": {"corpus": "files", "train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "valid.tsv"),
                 "test": str(tmp_path / "test.tsv"), "vocab_size": 300, "max_tokens": 300, "bleu_sentences": 3},
        "model": {"preset": "transformer-tiny", "overrides": {"d_model": D, "d_ff": 64, "n_layers": 1,
                                                              "max_len": 64}},
        "train": {"max_steps": 3, "eval_every": 2, "log_every": 1, "schedule": {"name": "constant", "warmup": 1},
                  "optim": {"lr": 1e-3}, "best_metric": "bleu"},
        "decode": {"max_len_b": 4},
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert tformer_main(["train", str(tmp_path / "recipe.yaml"), "--no-progress"]) == 0
    capsys.readouterr()

    assert baseline.main(["--run", str(tmp_path / "run"), "--steps", "3", "--limit", "5", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "parameters" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["tformer", "torch.nn.Transformer"]

    out_dir = tmp_path / "run-torch-baseline"
    result = json.loads((out_dir / "comparison.json").read_text())
    ours, theirs = result["models"]
    assert result["sentences"] == 5 and result["decode"]["beam"] == 1
    assert ours["steps"] == theirs["steps"] == 3
    assert theirs["parameters"] - ours["parameters"] == 2 * 2 * D  # same sizes but nn.Transformer's final norms
    for m in (ours, theirs):
        assert 0 <= m["bleu"] <= 100 and 0 <= m["chrf"] <= 100 and m["train_tokens_per_s"] > 0
    logged = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "eval/bleu" in r] == [2, 3]  # the recipe's evaluations, as ours had

    assert baseline.main(["--run", str(tmp_path / "run"), "--steps", "3", "--no-progress"]) == 2
    assert "already holds a run" in capsys.readouterr().err
