"""The user-error type (`tformer.errors.UserError`, issue 31): the CLI turns it (and an OSError) into one line
and exit 2; anything else is a bug of ours and keeps its traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tformer.cli import main
from tformer.errors import OutOfMemory, UserError, allocating


def failing(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """`tformer recipes list` raises `error`."""
    def run(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr("tformer.cli.recipes.cmd_list", run)


def test_a_user_error_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, UserError("beam=0 must be at least 1\n(a second line nobody reads)"))
    assert main(["recipes", "list"]) == 2
    assert capsys.readouterr().err == "tformer: error: beam=0 must be at least 1\n"


def test_an_os_error_names_the_path(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, PermissionError(13, "Permission denied", "/root/x"))
    assert main(["recipes", "list"]) == 2
    assert capsys.readouterr().err == "tformer: error: /root/x: Permission denied\n"


@pytest.mark.parametrize("error", [ValueError("an index went wrong inside"), RuntimeError("CUDA error"),
                                   IndexError("list index out of range"), TypeError("bad operand")])
def test_anything_else_is_our_bug_and_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          error: Exception) -> None:
    failing(monkeypatch, error)
    with pytest.raises(type(error)):  # Python prints the traceback, exit code 1
        main(["recipes", "list"])
    assert "tformer: error" not in capsys.readouterr().err


def test_user_error_is_a_value_error() -> None:
    assert issubclass(UserError, ValueError)  # callers' `except ValueError` keeps catching it


@pytest.mark.parametrize("error, said", [
    (MemoryError(), "out of memory while decoding batch 2; give it less at a time"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 3221225472 bytes."),
     "out of memory while decoding batch 2 (it asked for 3.0 GiB more)"),
    (RuntimeError("std::bad_alloc"), "out of memory while decoding batch 2;"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
     "out of memory while decoding batch 2 (it asked for 20.00 GiB more)"),
])
def test_an_allocation_failure_names_its_step(error: BaseException, said: str) -> None:
    with pytest.raises(OutOfMemory) as caught, allocating("decoding batch 2"):
        raise error
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_other_errors_pass_through_the_step() -> None:
    with pytest.raises(RuntimeError, match="^shapes"), allocating("decoding batch 2"):
        raise RuntimeError("shapes (2x3) and (4x5) cannot be multiplied")


def test_memory_running_out_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, MemoryError("std::bad_alloc"))
    assert main(["recipes", "list"]) == 2
    assert capsys.readouterr().err.startswith("tformer: error: out of memory; give it less at a time")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced by Linux")
def test_a_memory_limit_too_low_for_torch_is_one_line() -> None:
    """Under `ulimit -v` of 300 MB torch's libraries cannot even be mapped: one line and exit 2, not the
    ImportError's traceback."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (300 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "tformer", "recipes", "list"], preexec_fn=limit, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tformer: error: the memory limit is too low to load torch (")
    assert done.stderr.count("\n") == 1 and done.stdout == ""


def test_an_install_hint_names_the_extras_packages_for_any_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packages themselves serve a pip user and a clone alike (no editable install offered); without the
    installed metadata, the extra."""
    import importlib.metadata

    from tformer.errors import install_hint

    listed = ['ctranslate2>=4.7; extra == "ct2"', 'fastapi>=0.115; extra == "serve"',
              'uvicorn >=0.30; extra == "serve"']
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: listed)
    assert install_hint("ct2") == "pip install 'ctranslate2>=4.7' (tformer's [ct2] extra)"
    assert install_hint("serve") == "pip install 'fastapi>=0.115' 'uvicorn>=0.30' (tformer's [serve] extra)"
    assert "-e" not in install_hint("ct2")

    def missing(name: str) -> list[str]:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "requires", missing)
    assert install_hint("ct2") == "pip install 'tformer[ct2]'"
