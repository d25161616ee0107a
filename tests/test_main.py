"""Ctrl-C at any moment of a `tformer` command (`tformer.__main__`): one line `tformer: interrupted` and exit
code 130, never a traceback: while torch is imported, while the command line is, while a command runs, and
while the process winds down (a second Ctrl-C, atexit handlers). Each process here is real; the moment of
the signal is pinned by an import that waits (a meta-path finder that says when it is asked for a module,
then sleeps) or measured from the moment the interpreter runs the test's first line, so no race with
Python's own start decides the result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the code a child runs: say it is up, make the import of SLOW wait (saying so first), then be `tformer ARGS`
CHILD = """
import sys, time
SLOW, ENTRY, ARGS = sys.argv[1], sys.argv[2], sys.argv[3:]
class Slow:
    def find_spec(self, name, path=None, target=None):
        if name == SLOW:
            print("importing " + name, file=sys.stderr, flush=True)
            time.sleep(60)
        return None
sys.meta_path.insert(0, Slow())
print("up", file=sys.stderr, flush=True)
sys.argv = ["tformer", *ARGS]
if ENTRY == "script":  # what the `tformer` script pip writes does
    from tformer.__main__ import run
    sys.exit(run())
import runpy
runpy.run_module("tformer", run_name="__main__", alter_sys=True)
"""


def child(args: list[str], *, slow: str = "-", entry: str = "module") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", CHILD, slow, entry, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def wait_for(process: subprocess.Popen, line: str) -> None:
    got = process.stderr.readline().strip()
    assert got == line, got


def interrupted(process: subprocess.Popen) -> str:
    """Send SIGINT; the stderr after the lines already read, asserting exit code 130."""
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    return err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny translator: `tformer translate --checkpoint` loads it, then waits for stdin."""
    import tformer
    from tformer.tokenization import CharTokenizer
    from tformer.training.checkpoint import save_checkpoint

    chars = CharTokenizer.train(["the cat sees a dog"])
    config = tformer.preset("transformer-tiny", {"d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1,
                                                 "max_len": 16, "vocab_size": chars.vocab_size,
                                                 "pad_id": chars.pad_id, "bos_id": chars.bos_id,
                                                 "eos_id": chars.eos_id})
    path = tmp_path_factory.mktemp("tiny") / "best"
    save_checkpoint(path, model=tformer.build_model(config), config=config, tokenizer=chars)
    return path


@pytest.mark.parametrize(("slow", "entry"), [("torch", "module"), ("tformer.cli", "module"),
                                             ("tformer.cli", "script"), ("tformer.inference", "module")])
def test_ctrl_c_while_importing_is_one_line_and_130(slow: str, entry: str) -> None:
    # torch and the command line are imported before main() runs; tformer.inference inside the command
    process = child(["translate", "--checkpoint", "/nonexistent/run/best"], slow=slow, entry=entry)
    wait_for(process, "up")
    wait_for(process, f"importing {slow}")
    assert interrupted(process) == "tformer: interrupted\n"


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.5, 1.5])
def test_ctrl_c_at_any_moment_of_a_real_command_is_one_line_and_130(tiny: Path, delay: float) -> None:
    process = child(["translate", "--checkpoint", str(tiny)])  # loads, then waits for stdin: never done alone
    wait_for(process, "up")
    time.sleep(delay)
    assert interrupted(process) == "tformer: interrupted\n"


def test_ctrl_c_while_the_process_winds_down_is_ignored() -> None:
    # an atexit handler that is sent SIGINT (a Ctrl-C pressed again as the process ends) runs to its end
    code = ("import atexit, os, signal, sys, time\n"
            "def late():\n    os.kill(os.getpid(), signal.SIGINT); time.sleep(0.05); print('finished', flush=True)\n"
            "atexit.register(late)\nsys.argv = ['tformer', '--version']\n"
            "from tformer.__main__ import run\nsys.exit(run())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines()[-1] == "finished"


def test_the_tformer_script_is_the_entry_that_handles_ctrl_c() -> None:
    scripts = (ROOT / "pyproject.toml").read_text().split("[project.scripts]\n")[1].split("\n\n")[0]
    assert scripts == 'tformer = "tformer.__main__:run"'


def test_importing_tformer_imports_no_torch() -> None:
    # what lets the handler be installed before anything heavy: the names of `tformer` load when first used
    code = "import sys, tformer; assert 'torch' not in sys.modules; tformer.GPT; assert 'torch' in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
