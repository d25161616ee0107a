"""The training loop's log: one JSON object a line in out_dir/metrics.jsonl (what `tformer plot curves` and
`tformer report` read), and the same scalars to TensorBoard (out_dir/tensorboard) when the recipe asks for it
(`train.tensorboard: true`, or `tformer train --tensorboard`; the package comes with the `tb` extra).

Every line is strict JSON: a number that is not finite (a diverged loss, an infinite gradient norm) is
written as null, never as the bare NaN / Infinity that Python's json writes by default and other readers
refuse."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

from tformer.data.lines import DataError, decode_utf8
from tformer.errors import UserError, install_hint
from tformer.files import write_atomic
from tformer.ioerrors import writing
from tformer.runs import RunDir

INSTALL = f"train.tensorboard=true (--tensorboard) needs the tensorboard package: {install_hint('tb')}"


def check_tensorboard() -> None:
    """A ValueError saying how to install TensorBoard, unless torch can write its event files here."""
    if importlib.util.find_spec("tensorboard") is None:
        raise UserError(INSTALL)


class Logger:
    """Metrics to out_dir/metrics.jsonl, one JSON object a line, and with `tensorboard` to TensorBoard."""

    def __init__(self, out_dir: Path, *, resume_at: int | None, tensorboard: bool = False) -> None:
        """A fresh run starts a fresh log; a resumed one keeps the records up to its checkpoint's step and
        drops any logged after it (a crash since), so that no step appears twice."""
        out_dir.mkdir(parents=True, exist_ok=True)
        run = RunDir(out_dir)
        path = run.metrics
        if resume_at is not None and path.is_file():
            kept = [line for line in read_log(path).splitlines(keepends=True) if _logged_step(line) <= resume_at]
            write_atomic(path, "".join(kept))
        self.tb = None
        if tensorboard:
            check_tensorboard()
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_at is None else resume_at + 1  # a resumed run drops the events after last
            self.tb = SummaryWriter(str(run.tensorboard), purge_step=purge)
        # the run's own log, appended a record at a time as training goes (a whole-file atomic write would
        # rewrite it every step); only the trim on resume above replaces it, through write_atomic
        self.path = path
        self.file = open(path, "a" if resume_at is not None else "w", encoding="utf-8")  # noqa: SIM115

    def write(self, record: dict[str, Any]) -> None:
        with writing(self.path):  # a full disk, a file-size limit: the OSError names metrics.jsonl
            self.file.write(json.dumps({k: _finite_or_none(v) for k, v in record.items()}, allow_nan=False) + "\n")
            self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    self.tb.add_scalar(key, value, record["step"])
            self.tb.flush()

    def close(self) -> None:
        with writing(self.path):
            self.file.close()
        if self.tb is not None:
            self.tb.close()


def read_log(path: Path) -> str:
    """metrics.jsonl's text; a byte that is not UTF-8 (a disk's corruption, an editor's) is refused in one
    line naming the file and the line (`data.lines.decode_utf8`), before a resumed run trains a step."""
    try:
        return decode_utf8(path.read_bytes(), where=str(path))
    except DataError as e:
        raise UserError(f"cannot resume: {e}; delete or fix that line of the training log") from None


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _logged_step(line: str) -> float:
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf  # a torn last line: drop it


__all__ = ["Logger", "read_log"]
