"""Whether `train.compile` can build a training step here, asked before a run starts.

torch.compile's inductor writes the step as C++ for the CPU, built with the system's C++ compiler, and as
Triton kernels for a GPU, whose launcher Triton builds with the system's C compiler. Without them the first
step fails with torch's traceback (after the run has started and spent its set-up); asked first, the run is
refused in one line that says what is missing, as a precision the device cannot run is (precision.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import torch

from tformer.errors import UserError


def compile_problem(device: torch.device) -> str | None:
    """What torch.compile lacks to build a step on `device`, in a few words; None when nothing is missing
    (or when this torch has no way to tell: then torch.compile speaks for itself)."""
    if device.type == "cpu":
        try:
            from torch._inductor.cpp_builder import get_cpp_compiler  # where this torch has it
        except ImportError:
            return None
        try:
            get_cpp_compiler()  # runs `<compiler> --version` for each candidate: cached, a few ms once
        except Exception as e:  # noqa: BLE001  (torch's own error, InvalidCxxCompiler, says which it tried)
            return f"inductor builds the CPU step with a C++ compiler and found none ({str(e).strip()})"
        return None
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "inductor writes the GPU step in Triton, which is not installed (pip install triton)"
        if not (os.environ.get("CC") or any(shutil.which(c) for c in ("cc", "gcc", "clang"))):
            return "Triton builds its kernel launcher with a C compiler and found none (cc, gcc or clang; or set CC)"
    return None


def check_compilable(device: torch.device) -> None:
    """Refuse `train.compile=true` where `compile_problem` finds something missing (a UserError)."""
    problem = compile_problem(device)
    if problem is not None:
        raise UserError(f"train.compile=true cannot run on {device.type}: {problem}; install it, or set "
                        "train.compile=false")
