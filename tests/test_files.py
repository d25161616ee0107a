"""The one atomic directory writer (`tformer.files.atomic_directory`), shared by checkpoints and the Hugging
Face export: a failure anywhere leaves the old directory as it was and no temporary sibling; every file and
directory is fsync'd before the swap; the previous copy is kept when asked; files not rewritten survive
when asked."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tformer.files import atomic_directory, sha256, write_atomic


def contents(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def make(directory: Path, files: dict[str, str]) -> None:
    with atomic_directory(directory) as tmp:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)


def test_a_new_directory_appears_whole(tmp_path: Path) -> None:
    make(tmp_path / "out", {"a.txt": "1", "sub/b.txt": "2"})
    assert contents(tmp_path / "out") == {"a.txt": b"1", "sub/b.txt": b"2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_crash_in_the_middle_leaves_the_old_directory_intact(tmp_path: Path) -> None:
    path = tmp_path / "out"
    make(path, {"a.txt": "old"})
    with pytest.raises(RuntimeError, match="crash"), atomic_directory(path) as tmp:
        (tmp / "a.txt").write_text("new, half written")
        raise RuntimeError("crash")
    assert contents(path) == {"a.txt": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary sibling left


def test_a_failed_swap_puts_the_old_directory_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out"
    make(path, {"a.txt": "old"})
    real_replace = os.replace

    def failing_replace(src: str, dst: str) -> None:  # the publishing rename, after the old one moved aside
        if ".tmp-" in str(src):
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="rename failed"):
        make(path, {"a.txt": "new"})
    monkeypatch.undo()
    assert contents(path) == {"a.txt": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_replaced_directory_is_deleted_or_kept_when_asked(tmp_path: Path) -> None:
    path, previous = tmp_path / "out", tmp_path / "previous"
    make(path, {"a.txt": "1"})
    make(path, {"a.txt": "2"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with atomic_directory(path, keep_previous_as=previous) as tmp:
        (tmp / "a.txt").write_text("3")
    assert contents(path) == {"a.txt": b"3"} and contents(previous) == {"a.txt": b"2"}
    with atomic_directory(path, keep_previous_as=previous) as tmp:  # an older copy there is replaced
        (tmp / "a.txt").write_text("4")
    assert contents(path) == {"a.txt": b"4"} and contents(previous) == {"a.txt": b"3"}


def test_other_files_survive_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "out"
    make(path, {"a.txt": "1", "readme.md": "mine", "sub/c.txt": "3"})
    with atomic_directory(path, keep_other_files=True) as tmp:
        (tmp / "a.txt").write_text("2")
    assert contents(path) == {"a.txt": b"2", "readme.md": b"mine", "sub/c.txt": b"3"}
    make(path, {"a.txt": "3"})  # by default the directory is replaced whole
    assert contents(path) == {"a.txt": b"3"}


def test_every_file_and_directory_is_fsynced_before_the_swap(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name a file descriptor")
    monkeypatch.setattr(os, "fsync", fsync)
    with atomic_directory(tmp_path / "out") as tmp:
        (tmp / "sub").mkdir()
        (tmp / "a.txt").write_text("1")
        (tmp / "sub" / "b.txt").write_text("2")
    names = {Path(p).name for p in synced}
    assert {"a.txt", "b.txt", "sub", tmp.name, tmp_path.name} <= names  # files, folders, the parent's rename


def test_write_atomic_and_sha256(tmp_path: Path) -> None:
    path = write_atomic(tmp_path / "d" / "f.txt", "héllo")
    assert path.read_bytes() == "héllo".encode()
    assert sha256(path) == hashlib.sha256("héllo".encode()).hexdigest()


def test_a_symlink_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    """A link to a folder (or a dangling one, naming the folder to make) is never replaced by a directory,
    and no moved-aside copy of the link is left behind."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "old.txt").write_text("old")
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "dangling").symlink_to("made")
    make(tmp_path / "link", {"a.txt": "1"})
    make(tmp_path / "dangling", {"b.txt": "2"})
    assert os.readlink(tmp_path / "link") == "real" and os.readlink(tmp_path / "dangling") == "made"
    assert contents(tmp_path / "real") == {"a.txt": b"1"} and contents(tmp_path / "made") == {"b.txt": b"2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "link", "made", "real"]
