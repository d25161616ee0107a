"""The training loop's log: one JSON object a line in out_dir/metrics.jsonl (what `tformer plot curves` and
`tformer report` read), and the same scalars to TensorBoard when it is installed.

Every line is strict JSON: a number that is not finite (a diverged loss, an infinite gradient norm) is
written as null, never as the bare NaN / Infinity that Python's json writes by default and other readers
refuse."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tformer.files import write_atomic


class Logger:
    """Metrics to out_dir/metrics.jsonl, one JSON object a line, and to TensorBoard when it is installed."""

    def __init__(self, out_dir: Path, *, resume_at: int | None) -> None:
        """A fresh run starts a fresh log; a resumed one keeps the records up to its checkpoint's step and
        drops any logged after it (a crash since), so that no step appears twice."""
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "metrics.jsonl"
        if resume_at is not None and path.is_file():
            kept = [line for line in path.read_text().splitlines(keepends=True) if _logged_step(line) <= resume_at]
            write_atomic(path, "".join(kept))
        self.file = open(path, "a" if resume_at is not None else "w")  # noqa: SIM115
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps({k: _finite_or_none(v) for k, v in record.items()}, allow_nan=False) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float):
                    self.tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _logged_step(line: str) -> float:
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf  # a torn last line: drop it


__all__ = ["Logger"]
