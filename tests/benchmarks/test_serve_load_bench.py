"""benchmarks/serve_load.py --quick: it trains a small translator, loads a real `tformer serve` subprocess with
and without micro-batching, and every request gets its own answer (the same as its sentence decoded alone); with
--mode generate, a tiny random GPT served with continuous batching and with micro-batching, the same."""

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

from benchmarks import serve_load


def test_serve_load_quick(tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    with redirect_stdout(io.StringIO()) as printed:
        result = serve_load.main(["--quick", "--texts", "2", "--out", str(out)])
    rows = [(r["server"], r["clients"]) for r in result["results"]]
    assert rows == [("micro-batching", 1), ("micro-batching", 4), ("one at a time", 4)]
    for r in result["results"]:
        assert r["requests"] == r["answered"] == r["right"] == 12 and r["wrong"] == []
        assert r["sentences_per_s"] == 2 * r["requests_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
        assert r["batches"] >= 1
    single = result["results"][-1]
    assert single["mean_batch"] == 1.0 and single["batches"] == 12  # --max-batch 1: one request a batch
    assert result["all_right"] and result["ratio"] > 0
    assert json.loads(out.read_text())["results"][0]["right"] == 12
    assert "| micro-batching | 4 |" in printed.getvalue()


def test_serve_load_generate_quick(tmp_path: Path) -> None:
    """--mode generate --quick: a tiny random GPT served with continuous batching and with micro-batching, each
    in its own process, 4 clients streaming 8 greedy requests of 2 to 6 new tokens; every answer equal to the
    library's alone, and every reported figure there."""
    out = tmp_path / "generate.json"
    with redirect_stdout(io.StringIO()) as printed:
        result = serve_load.main(["--mode", "generate", "--quick", "--out", str(out)])
    assert [(r["server"], r["clients"]) for r in result["results"]] == [("continuous", 4), ("micro", 4)]
    for r in result["results"]:
        assert r["requests"] == r["answered"] == r["right"] == 8 and r["wrong"] == []
        assert 8 * 2 <= r["tokens"] <= 8 * 6 and r["tokens_per_s"] > 0
        assert r["ttft_p99_ms"] >= r["ttft_p50_ms"] > 0 and r["itl_p99_ms"] >= r["itl_p50_ms"] >= 0
    assert result["all_right"] and result["ratio"] > 0 and result["checkpoint"] == "random GPT"
    assert json.loads(out.read_text())["results"][1]["right"] == 8
    assert "| continuous | 4 |" in printed.getvalue() and "tokens/s" in printed.getvalue()
