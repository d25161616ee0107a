"""`tformer.ioerrors.writing`: every way a write fails on a full disk (Python's write with no file name,
shutil's list of failures, a Rust library's own exception) becomes one OSError with its number, its reason and
the file; anything else goes on as it is."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from tformer.files import write_atomic, write_output
from tformer.ioerrors import writing


def raised(error: BaseException, file: str = "out.txt") -> BaseException:
    with pytest.raises(BaseException) as info, writing(file):
        raise error
    return info.value


def test_an_os_error_without_a_file_gets_the_file() -> None:
    e = raised(OSError(errno.ENOSPC, "No space left on device"))
    assert (type(e), e.errno, e.strerror, e.filename) == (OSError, errno.ENOSPC, "No space left on device", "out.txt")
    assert isinstance(raised(OSError(errno.EPIPE, "Broken pipe")), BrokenPipeError)  # still what main quiets


def test_an_os_error_naming_its_file_goes_on_as_it_is() -> None:
    error = PermissionError(errno.EACCES, "Permission denied", "/etc/x")
    assert raised(error) is error


def test_shutils_list_becomes_its_first_failure() -> None:
    e = raised(shutil.Error([("a/t.json", "b/t.json", "[Errno 28] No space left on device"),
                             ("a/u.json", "b/u.json", "[Errno 28] No space left on device")]))
    assert (type(e), e.errno, e.strerror, e.filename) == (OSError, 28, os.strerror(28), "b/t.json")


def test_a_libraries_own_error_becomes_its_os_error_and_others_go_on() -> None:
    e = raised(Exception("I/O error: No space left on device (os error 28)"), "ckpt/tokenizer")
    assert (type(e), e.errno, e.filename) == (OSError, 28, "ckpt/tokenizer")
    assert isinstance(raised(ValueError("a bug")), ValueError)
    assert isinstance(raised(KeyboardInterrupt()), KeyboardInterrupt)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_writing_to_dev_full_names_it(tmp_path: Path) -> None:
    with pytest.raises(OSError) as info:
        write_output("/dev/full", "text\n")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, "/dev/full")


def test_the_atomic_writer_names_its_file_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "out.txt").write_text("before")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        write_atomic(tmp_path / "out.txt", "after")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(tmp_path / "out.txt"))
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and (tmp_path / "out.txt").read_text() == "before"


def test_a_message_of_its_own_raised_over_an_os_error_goes_on_as_it_is() -> None:
    from tformer.errors import UserError

    with pytest.raises(UserError, match="a message of its own"), writing("out.txt"):
        try:
            raise OSError(errno.ENOENT, "No such file or directory")
        except OSError:
            raise UserError("a message of its own") from None
