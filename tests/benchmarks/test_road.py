"""benchmarks/road.py on two tiny translation runs (a Transformer and an attention RNN, a few steps each on a
toy corpus): the bucket counts add up to the sentences, the overall scores are `tformer evaluate`'s on the same
sentences, the table, the JSON and the picture are written; a directory without a checkpoint is a one-line
error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks import road
from tests.cli.test_cli_translation import corpus
from tformer.cli import main as tformer_main

LIMIT = 12
MODELS = {
    "transformer": {"preset": "transformer-tiny", "overrides": {"d_model": 32, "d_ff": 64, "n_layers": 1,
                                                               "max_len": 64}},
    "rnn": {"preset": "rnn-attention-small", "overrides": {"d_model": 16, "n_layers": 1, "max_len": 64,
                                                           "match": "dot"}},
}

pytestmark = pytest.mark.usefixtures("one_thread")




@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two run directories of `tformer train`, 4 steps each on the same toy English -> German corpus."""
    root = tmp_path_factory.mktemp("road")
    for split, n, seed in (("train", 200, 0), ("valid", 8, 1), ("test", 20, 2)):
        corpus(root / f"{split}.tsv", n, seed)
    out = []
    for name, model in MODELS.items():
        recipe = {
            "task": "translation", "out_dir": str(root / name),
            "data": {"corpus": "files", "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv"),
                     "test": str(root / "test.tsv"), "vocab_size": 300, "max_tokens": 400, "bleu_sentences": 4},
            "model": model,
            "train": {"max_steps": 4, "eval_every": 2, "log_every": 1, "threads": 1, "optim": {"lr": 1e-2},
                      "schedule": {"name": "constant", "warmup": 1}},
            "decode": {"beam": 2, "max_len_b": 5},
        }
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(recipe))
        assert tformer_main(["train", str(path), "--no-progress"]) == 0
        out.append(root / name)
    return out


def test_buckets_are_cut_at_the_edges() -> None:
    assert road.bucket_labels([20, 30]) == ["1-20", "21-30", "31+"]
    assert [road.bucket_of(n, [20, 30]) for n in (0, 1, 20, 21, 30, 31, 500)] == [0, 0, 0, 1, 1, 2, 2]


def test_road_scores_as_evaluate_and_buckets_every_sentence(runs: list[Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert road.main([*map(str, runs), "--out", str(out), "--limit", str(LIMIT), "--edges", "3", "5"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "road.json").read_text())["results"]
    assert [r["model"] for r in results] == ["Transformer", "RNN + attention (dot)"]
    for run, r in zip(runs, results, strict=True):
        assert r["sentences"] == LIMIT and sum(b["sentences"] for b in r["buckets"]) == LIMIT
        assert [b["bucket"] for b in r["buckets"]] == ["1-3", "4-5", "6+"]
        assert r["steps"] == 4 and r["params"] > 0 and r["tokens_per_s"] > 0 and r["decode"]["beam"] == 2
        assert tformer_main(["evaluate", "--checkpoint", str(run / "best"), "--split", "test",
                             "--limit", str(LIMIT), "--json"]) == 0
        evaluated = json.loads(capsys.readouterr().out)
        assert (r["bleu"], r["chrf"], r["sentences"]) == (evaluated["bleu"], evaluated["chrf"],
                                                          evaluated["sentences"])
    table = (out / "road.md").read_text()
    assert table in printed and "| Transformer |" in table and "| RNN + attention (dot) |" in table
    assert "BLEU 1-3 (n=" in table
    assert (out / "road-bleu-by-length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_directory_without_a_checkpoint_is_a_one_line_error(runs: list[Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert road.main([str(runs[0]), str(empty), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{empty} has no checkpoint" in err and "best/ or last/" in err
    assert not (tmp_path / "out").exists()  # refused before anything was translated
