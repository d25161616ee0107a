"""benchmarks/speculative.py on tiny random checkpoints: every contender in its own process, the report's
fields, and the speculative contenders' tokens identical to the target alone's."""

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import torch

import tformer
from benchmarks import speculative
from tformer.tokenization import CharTokenizer
from tformer.training.checkpoint import save_checkpoint


def tiny_pair(root: Path) -> tuple[Path, Path]:
    """A two-layer target GPT and a one-layer draft, one character tokenizer."""
    tokenizer = CharTokenizer.train(["In the beginning God created the heavens and the earth."])
    for name, layers, seed in (("target", 2, 0), ("draft", 1, 1)):
        torch.manual_seed(seed)
        config = tformer.preset("gpt-tiny", {"vocab_size": tokenizer.vocab_size, "max_len": 32, "n_layers": layers,
                                             "d_model": 32, "d_ff": 64, "n_heads": 2, "bos_id": tokenizer.eos_id,
                                             "eos_id": tokenizer.eos_id, "init": {"kind": "normal", "std": 0.5}})
        save_checkpoint(root / name, model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return root / "target", root / "draft"


def test_the_bench_reports_each_contender_and_identical_tokens(tmp_path: Path) -> None:
    target, draft = tiny_pair(tmp_path)
    out = tmp_path / "speculative.json"
    argv = ["--gpt", str(target), "--draft", str(draft), "--prompt", "In the", "--prompt", "God", "--prompts", "2",
            "--new-tokens", "8", "--draft-tokens", "2", "3", "--reps", "1", "--threads", "1", "--out", str(out)]
    with redirect_stdout(io.StringIO()) as printed:
        result = speculative.main(argv)
    rows = result["results"]
    assert [r["contender"] for r in rows] == ["target alone", "with draft, K=2", "with draft, K=3"]
    assert [r["draft_tokens"] for r in rows] == [0, 2, 3]
    for r in rows:
        assert r["same"] and r["outputs"] == rows[0]["outputs"]
        assert len(r["outputs"]) == 2 and all(len(o) == 8 for o in r["outputs"])  # no stop token: 8 each
        assert r["tokens_per_s"] > 0 and r["speedup"] > 0 and len(r["rounds"]) == 1
        assert r["quiet"] in ("quiet", "not quiet", "unknown")
    assert rows[0]["acceptance_rate"] is None and rows[0]["passes_per_token"] == 1.0
    assert all(0 <= r["acceptance_rate"] <= 1 and 0 < r["passes_per_token"] <= 1 for r in rows[1:])
    assert json.loads(out.read_text())["results"][1]["contender"] == "with draft, K=2"
    table = printed.getvalue()
    assert "| with draft, K=3 |" in table and "| target alone |" in table and "NO" not in table
