"""`tformer.files.write_output`: what a user names as an output is written as what it is, a regular file
atomically (its permission bits kept), a symbolic link through to its target, a FIFO or a pipe in place."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tformer.files import is_special_file, write_output


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
