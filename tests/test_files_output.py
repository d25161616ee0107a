"""`tformer.files.write_output`: what a user names as an output is written as what it is, a regular file
atomically (its permission bits kept), a symbolic link through to its target, a FIFO or a pipe in place, -
to standard output; `check_output` / `check_output_dir` refuse, before any work, what cannot be written."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tformer.errors import UserError
from tformer.files import check_output, check_output_dir, is_special_file, is_stream, write_output


def test_a_regular_file_is_replaced_keeping_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old")
    path.chmod(0o600)
    other = tmp_path / "hard.txt"
    os.link(path, other)
    write_output(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o600
    assert other.read_text() == "old"  # atomic: a new inode, never the old one half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.txt", "out.txt"]


def test_a_new_file_and_its_directory(tmp_path: Path) -> None:
    assert write_output(tmp_path / "d" / "out.bin", b"\x00\x01") == tmp_path / "d" / "out.bin"
    assert (tmp_path / "d" / "out.bin").read_bytes() == b"\x00\x01"


def test_a_symlink_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("sub/real.txt")
    (tmp_path / "chain.txt").symlink_to("link.txt")
    write_output(tmp_path / "chain.txt", "new")
    assert (tmp_path / "chain.txt").is_symlink() and (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "sub" / "real.txt").read_text() == "new"
    (tmp_path / "dangling.txt").symlink_to("made.txt")
    write_output(tmp_path / "dangling.txt", "made")
    assert (tmp_path / "dangling.txt").is_symlink() and (tmp_path / "made.txt").read_text() == "made"


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, "through\n")
    reader.join(timeout=10)
    assert got == [b"through\n"] and fifo.is_fifo() and is_special_file(fifo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_a_pipe_named_by_dev_fd(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        write_output(f"/dev/fd/{write_end}", "piped\n")
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        assert f.read() == b"piped\n"


def test_special_files(tmp_path: Path) -> None:
    assert is_special_file("/dev/null")
    assert not is_special_file(tmp_path) and not is_special_file(tmp_path / "none")
    (tmp_path / "f").write_text("x")
    assert not is_special_file(tmp_path / "f")
    write_output("/dev/null", "discarded")


def test_dash_is_standard_output(tmp_path: Path, capsysbinary: pytest.CaptureFixture,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_output("-", "text, ")
    write_output("-", b"\x89PNG bytes")
    assert capsysbinary.readouterr().out == b"text, \x89PNG bytes" and list(tmp_path.iterdir()) == []
    assert is_stream("-") and is_stream("/dev/null") and not is_stream(tmp_path / "out.png")


@pytest.mark.parametrize(("name", "message"), [
    ("", "--output '' is empty; give a file name or - for standard output"),
    ("  ", "--output '  ' is empty"),
    ("{tmp}/newdir/", "--output {tmp}/newdir/ ends with a slash, so it names a folder, and there is no such folder"),
    ("{tmp}", "--output {tmp} is a directory; give a file path"),
    ("{tmp}/afile/out.txt", "--output {tmp}/afile/out.txt: {tmp}/afile is a file; give a file path in a directory"),
])
def test_check_output_refuses_in_one_line(name: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError) as e:
        check_output(name.format(tmp=tmp_path))
    assert str(e.value).startswith(message.format(tmp=tmp_path)) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    with pytest.raises(UserError, match="is empty"):
        write_output("", "x")  # the writer itself refuses what names no file
    with pytest.raises(UserError, match="no such folder"):
        write_output(f"{tmp_path}/newdir/", "x")


def test_check_output_passes_what_can_be_written(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to("made.txt")
    os.mkfifo(tmp_path / "fifo")
    for name in ("-", "/dev/null", tmp_path / "fifo", tmp_path / "dangling", tmp_path / "new" / "out.txt",
                 f"{tmp_path}/"[:-1] + "/x.txt"):
        check_output(name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "fifo"]  # checking makes nothing


@pytest.mark.parametrize(("name", "message"), [
    ("", "--out-dir '' is empty; give a folder name"),
    ("-", "--out-dir - would be standard output, which cannot hold a folder of files"),
    ("/dev/null", "--out-dir /dev/null is not a folder"),
    ("{tmp}/afile", "--out-dir {tmp}/afile is not a folder"),
])
def test_check_output_dir_refuses_in_one_line(name: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError) as e:
        check_output_dir(name.format(tmp=tmp_path))
    assert str(e.value).startswith(message.format(tmp=tmp_path)) and "\n" not in str(e.value)
    (tmp_path / "dangling").symlink_to("made")
    for ok in (tmp_path, tmp_path / "new", f"{tmp_path}/new/", tmp_path / "dangling"):
        check_output_dir(ok)
