"""The user-error type (`tformer.errors.UserError`, issue 31): the CLI turns it (and an OSError) into one line
and exit 2; anything else is a bug of ours and keeps its traceback."""

from __future__ import annotations

import argparse

import pytest

from tformer.cli import main
from tformer.errors import UserError


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
