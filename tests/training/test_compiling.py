"""`train.compile` asks first whether torch.compile can build a step on the device (training/compiling.py): on
the CPU, torch's own search for a C++ compiler; on a GPU, Triton and a C compiler. Each missing piece is named
in one line; where nothing is missing the check is silent (this machine builds the CPU step: the compiled
training tests in test_precision.py run here)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch
import torch._inductor.config

from tformer.errors import UserError
from tformer.training import compiling
from tformer.training.compiling import check_compilable, compile_problem

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


def test_this_machine_can_compile_for_its_devices() -> None:
    """The CPU here, and its GPU where it has one (benchmarks/gpu_check.sh runs this file there)."""
    for device in [CPU] + ([GPU] if torch.cuda.is_available() else []):
        assert compile_problem(device) is None
        check_compilable(device)


def test_no_cpp_compiler_is_named() -> None:
    # torch's own patch: pytest's monkeypatch deletes a config key on undo instead of restoring it
    with torch._inductor.config.patch({"cpp.cxx": ("tformer-no-such-c++", "tformer-nor-this")}), \
            pytest.raises(UserError) as caught:
        check_compilable(CPU)
    assert compile_problem(CPU) is None  # the search itself is not cached when it fails
    message = str(caught.value)
    assert message.startswith("train.compile=true cannot run on cpu: inductor builds the CPU step with a C++ "
                              "compiler and found none (")
    assert "tformer-no-such-c++" in message and "tformer-nor-this" in message  # the names torch tried
    assert message.endswith("; install it, or set train.compile=false") and "\n" not in message


@pytest.fixture
def triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton importable, whether or not this machine has it (a CPU build of torch does not)."""
    find = importlib.util.find_spec
    monkeypatch.setattr(compiling.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "triton" else find(name, *a))


def test_a_gpu_without_triton_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    find = importlib.util.find_spec
    monkeypatch.setattr(compiling.importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else find(name, *a))
    assert compile_problem(GPU) == "inductor writes the GPU step in Triton, which is not installed (pip install triton)"


def test_a_gpu_without_a_c_compiler_is_named(monkeypatch: pytest.MonkeyPatch, triton: None) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(UserError, match=r"^train.compile=true cannot run on cuda: Triton builds its kernel launcher "
                                        r"with a C compiler and found none \(cc, gcc or clang; or set CC\); "):
        check_compilable(GPU)


@pytest.mark.parametrize("how", ["CC", "PATH"])
def test_a_gpu_with_triton_and_a_c_compiler_passes(monkeypatch: pytest.MonkeyPatch, triton: None, how: str) -> None:
    if how == "CC":
        monkeypatch.setenv("CC", "/opt/my/cc")
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    else:
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/gcc" if name == "gcc" else None)
    assert compile_problem(GPU) is None


def test_other_devices_are_left_to_torch() -> None:
    assert compile_problem(torch.device("meta")) is None
