"""`tformer serve` as a command: it starts a real server (a subprocess here, on a free port it prints) and
stops on Ctrl-C with exit code 0; it loads the checkpoint in the thread that then runs the model's work; a
bad option or checkpoint is one line `tformer: error: ...` and exit code 2 before anything listens; and
without FastAPI and uvicorn it says how to install the `serve` extra."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from serving import call

from tformer.cli import main

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_serve_starts_answers_and_stops_on_ctrl_c(checkpoints: dict[str, Path]) -> None:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen([sys.executable, "-m", "tformer", "serve", "--checkpoint", str(checkpoints["gpt"]),
                                "--port", "0", "--device", "cpu", "--max-new-tokens", "5"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line + process.stderr.read() if process.poll() is not None else line
        url = match.group(1)
        assert "gpt checkpoint" in line and "/generate, /score, /attention" in line
        assert call(url, "GET", "/health") == (200, {"status": "ok"})
        status, out = call(url, "POST", "/generate", {"prompt": "the", "temperature": 0})
        assert status == 200 and out["tokens"] <= 5
        assert call(url, "GET", "/info")[1]["limits"]["max_new_tokens"] == 5
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0
    assert "Traceback" not in process.stderr.read()


def test_the_checkpoint_is_loaded_in_the_thread_that_runs_the_model(checkpoints: dict[str, Path],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from tformer.serve import app, endpoints, server

    seen: dict[str, Any] = {}

    def load_service(*args: Any, **kwargs: Any) -> Any:
        seen["loader"] = threading.current_thread()
        return real_load(*args, **kwargs)

    def create_app(service: Any, *, thread: Any) -> Any:
        seen["runner"] = thread.submit(threading.current_thread).result()
        return real_create(service, thread=thread)

    class Quiet:  # the server, not run: the app was made
        def __init__(self, made: Any, **options: Any) -> None:
            seen["app"] = made

        def run(self, sockets: list) -> None:
            sockets[0].close()

    real_load, real_create = endpoints.load_service, app.create_app
    monkeypatch.setattr(endpoints, "load_service", load_service)
    monkeypatch.setattr(app, "create_app", create_app)
    monkeypatch.setattr(server, "make_server", Quiet)
    assert main(["serve", "--checkpoint", str(checkpoints["gpt"]), "--port", "0", "--device", "cpu"]) == 0
    assert seen["loader"] is seen["runner"] and seen["loader"] is not threading.main_thread()
    assert seen["loader"].name.startswith("tformer-model") and "app" in seen


@pytest.mark.parametrize("argv, words", [
    (["--port", "70000"], ["argument --port", "70000 is out of range", "[0, 65535]"]),
    (["--device", "tpu"], ["--device='tpu' is not a device", "auto, cpu, cuda"]),
    (["--max-batch", "0"], ["argument --max-batch", "0 is out of range"]),
    (["--max-batch", "5000"], ["--max-batch=5000 is more than 1024"]),
    (["--batch-wait-ms", "nan"], ["argument --batch-wait-ms", "not a finite number"]),
    (["--generate-batching", "eager"], ["argument --generate-batching", "'eager'", "continuous", "micro"]),
    (["--max-step-tokens", "0"], ["argument --max-step-tokens", "0 is out of range"]),
    (["--draft", "d", "--generate-batching", "continuous"], ["--draft d decodes a generation alone",
                                                              "--generate-batching continuous"]),
    (["--host", "256.1.1.1"], ["cannot listen on 256.1.1.1:0"]),
])
def test_bad_options_are_one_line_and_exit_2(argv: list[str], words: list[str], checkpoints: dict[str, Path],
                                             capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "--checkpoint", str(checkpoints["gpt"]), "--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tformer: error: "), err
    for word in words:
        assert word in err, err


def test_a_missing_checkpoint_is_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "--checkpoint", str(tmp_path / "nope"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: ") and "nope" in err and err.count("\n") == 1


def test_without_the_serve_extra_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, checkpoints: dict,
                                                           capsys: pytest.CaptureFixture) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    assert main(["serve", "--checkpoint", str(checkpoints["gpt"])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: tformer serve needs FastAPI and uvicorn: pip install 'fastapi>=")
    assert "'uvicorn>=" in err and err.endswith(" (tformer's [serve] extra)\n")


def test_the_rest_of_tformer_does_not_import_fastapi() -> None:
    code = ("import sys, tformer, tformer.cli, tformer.tasks, tformer.serve, tformer.serve.service; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette')))")
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]"
