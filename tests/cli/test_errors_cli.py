"""The bad-input catalogue (docs/errors.md), round three: the command-line conventions of issue 19 (--device,
--dtype, generate's prompts and samples, evaluate --hyp-out, score's input, train --tensorboard). Each case
through `tformer.cli.main` gives one line and exit 2, before anything loads, and leaves the disk as it was
(catalogue.run_case)."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import torch
from catalogue import Case, Ctx, case_tests


def piped(c: Ctx, data: bytes, argv: list[str]) -> list[str]:
    c.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    return argv


def translate(c: Ctx, *extra: str) -> list[str]:
    return ["translate", "--checkpoint", str(c.w.s2s), "-i", c.file("in.txt", "the cat\n"), *extra]


def generate(c: Ctx, *extra: str) -> list[str]:
    return ["generate", "--checkpoint", str(c.w.gpt), "--max-new-tokens", "2", *extra]


def a_run(c: Ctx) -> str:
    """{tmp}/run/best, a translator with the recipe beside it; returns the checkpoint."""
    c.copy(c.w.s2s, "run/best")
    c.file("run/recipe.yaml", Path(c.w.recipe).read_text())
    return str(c.tmp / "run" / "best")


def without_tensorboard(c: Ctx) -> list[str]:
    find_spec = importlib.util.find_spec
    c.monkeypatch.setattr(importlib.util, "find_spec",
                          lambda name, *a: None if name == "tensorboard" else find_spec(name, *a))
    return [*c.train(), "--tensorboard"]


CASES = [
    Case("inference-device-unknown", lambda c: translate(c, "--device", "xla"),
         ("--device='xla' is not allowed; use auto, cpu, cuda, cuda:N or mps",)),
    Case("inference-device-not-a-device", lambda c: translate(c, "--device", "gpu"),
         ("--device='gpu' is not a device; use auto, cpu, cuda, cuda:N or mps",)),
    Case("inference-gpu-not-there", lambda c: translate(c, "--device", f"cuda:{torch.cuda.device_count()}"),
         (f"--device='cuda:{torch.cuda.device_count()}' but torch sees",)),
    Case("inference-dtype-unknown", lambda c: translate(c, "--dtype", "int4"),
         ("argument --dtype: invalid choice: 'int4' (choose from 'float32', 'bfloat16', 'float16')",)),
    Case("generate-no-prompt", lambda c: piped(c, b"", generate(c)),
         ("there is no prompt to continue; give --prompt TEXT, or prompts one a line on stdin or in --input FILE",)),
    Case("generate-one-prompt-of-many-too-long", lambda c: generate(c, "--prompt", "In", "--prompt", "x" * 40),
         ("prompt 2: the prompt is 41 tokens with the start token", "max_len=32")),
    Case("generate-zero-samples", lambda c: generate(c, "--prompt", "In", "-n", "0"),
         ("argument -n/--num-samples: 0 is out of range",)),
    Case("evaluate-hyp-out-a-directory",
         lambda c: ["evaluate", "--checkpoint", a_run(c), "--split", "valid", "--hyp-out", str(c.tmp)],
         ("--hyp-out {tmp} is a directory; give a file path",)),
    Case("score-two-inputs",
         lambda c: ["score", "--checkpoint", str(c.w.gpt), c.file("a.txt", "In\n"), "-i", c.file("b.txt", "x\n")],
         ("give the file to score once: as FILE ({tmp}/a.txt) or as --input ({tmp}/b.txt)",)),
    Case("train-tensorboard-not-installed", without_tensorboard,
         ("train.tensorboard=true (--tensorboard) needs the tensorboard package: pip install 'tensorboard>=",
          "(tformer's [tb] extra)")),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)
