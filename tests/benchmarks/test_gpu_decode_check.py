"""benchmarks/gpu_decode_check.py at tiny sizes on the CPU (where "captured" runs the fixed-shape steps
eagerly): every row it times, its checks passed, its JSON and Markdown written."""

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

from benchmarks import gpu_decode_check


def test_gpu_decode_check_runs_tiny_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu-decode.json"
    with redirect_stdout(io.StringIO()):
        info = gpu_decode_check.main(["--device", "cpu", "--tiny", "--dtype", "float32", "--batches", "1", "2",
                                      "--out", str(out)])
    assert info["failures"] == [] and info["sampled"]["same_sampled"] and all(info["float32"].values())
    rows = {(r["task"], r["contender"], r["batch"]) for r in info["results"]}
    for batch in (1, 2):
        assert {("generate", name, batch) for name in ("tformer eager", "tformer captured", "transformers",
                                                       "transformers static cache")} <= rows
        assert {("greedy translation", name, batch) for name in ("tformer eager", "tformer captured")} <= rows
    assert all(r["tokens_per_s"] > 0 for r in info["results"])
    assert json.loads(out.read_text())["results"] and "| generate | tformer captured | 1 |" in out.with_suffix(
        ".md").read_text()
