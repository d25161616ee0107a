"""The training loop's log (`training.logger`): a write that fails (a full disk, a file-size limit) names
metrics.jsonl, and a resumed run refuses a log that is not UTF-8 in one line naming the file and the line,
leaving the log as it was."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tformer.errors import UserError
from tformer.training.logger import Logger


def test_a_full_disk_names_the_log(tmp_path: Path) -> None:
    log = Logger(tmp_path, resume_at=None)
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    log.file.close()
    log.file = open("/dev/full", "w")  # noqa: SIM115  (what a full disk does to the log's writes)
    with pytest.raises(OSError) as e:
        log.write({"step": 1, "loss": 2.0})
    assert (e.value.errno, e.value.filename) == (errno.ENOSPC, str(tmp_path / "metrics.jsonl"))
    log.file = open(os.devnull, "w")  # noqa: SIM115
    log.close()


def test_a_log_that_is_not_utf8_is_refused_on_resume_naming_the_line(tmp_path: Path) -> None:
    data = b'{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.\xff}\n{"step": 3, "loss": 2.5}\n'
    (tmp_path / "metrics.jsonl").write_bytes(data)
    with pytest.raises(UserError) as e:
        Logger(tmp_path, resume_at=2)
    assert str(e.value) == (f"cannot resume: {tmp_path / 'metrics.jsonl'}:2: not valid UTF-8 (byte 0xff at column "
                            "23); the text must be UTF-8; delete or fix that line of the training log")
    assert (tmp_path / "metrics.jsonl").read_bytes() == data
    (tmp_path / "metrics.jsonl").write_bytes(data.replace(b"\xff", b"9"))
    Logger(tmp_path, resume_at=2).close()
    assert (tmp_path / "metrics.jsonl").read_bytes() == data.replace(b"\xff", b"9").rsplit(b"{", 1)[0]
