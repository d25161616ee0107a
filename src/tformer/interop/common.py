"""What the Hugging Face mapping modules (gpt2, bert, marian, pegasus, llama) share: the activation
names, a checkpoint's tensors that remember which were read (`Weights`), name pairs for a linear layer,
and the checks that a config can be expressed (`unmet`, `require`). It imports no mapping module and
`hf.py`, which lists them, imports it through them: the imports point one way, hf -> families -> common.
"""

from __future__ import annotations

import operator
import re
from typing import Any

from torch import Tensor

from tformer.config import TransformerConfig
from tformer.errors import UserError

# Activation names: Hugging Face's (ACT2FN) -> ours, and ours -> the name we write.
ACTIVATIONS_FROM_HF = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                       "silu": "silu", "swish": "silu"}
ACTIVATIONS_TO_HF = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu"}


class Weights:
    """A checkpoint's tensors by name. It remembers which were read, so that a weight nothing maps is an
    error (`check_all_used`) rather than silently dropped; `ignore` holds regexes for names that carry no
    information of their own (buffers, copies of tied weights)."""

    def __init__(self, tensors: dict[str, Tensor], *, ignore: tuple[str, ...] = ()) -> None:
        self.tensors = tensors
        self.ignore = [re.compile(p) for p in ignore]
        self.used: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __getitem__(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise UserError(f"the checkpoint has no weight {name!r} (it has {len(self.tensors)} weights, "
                             f"e.g. {', '.join(sorted(self.tensors)[:3])})")
        self.used.add(name)
        return self.tensors[name]

    def check_all_used(self) -> None:
        left = sorted(k for k in self.tensors
                      if k not in self.used and not any(p.fullmatch(k) for p in self.ignore))
        if left:
            raise UserError(f"the checkpoint has {len(left)} weights our model has no place for: "
                             f"{', '.join(left[:5])}{' ...' if len(left) > 5 else ''}")


def linear(ours: str, theirs: str, *, bias: bool = True) -> list[tuple[str, str]]:
    """(our name, their name) pairs for a module's weight and, if it has one, bias."""
    return [(f"{ours}.weight", f"{theirs}.weight")] + ([(f"{ours}.bias", f"{theirs}.bias")] if bias else [])


def unmet(cfg: TransformerConfig, required: dict[str, tuple]) -> list[str]:
    """'name=value (needs ...)' for each dotted config name whose value is not among `required[name]`."""
    out = []
    for name, allowed in required.items():
        value = operator.attrgetter(name)(cfg)
        if value not in allowed:
            out.append(f"{name}={value!r} (needs {' or '.join(map(repr, allowed))})")
    return out


def activation_from_hf(name: str, table: dict[str, str] = ACTIVATIONS_FROM_HF) -> str:
    if name not in table:
        raise UserError(f"activation {name!r} has no equivalent here; supported: {', '.join(table)}")
    return table[name]


def require(d: dict, key: str, allowed: tuple, default: Any = None) -> None:
    """A Hugging Face config option our models do not implement must be at a value they match."""
    value = d.get(key, default)
    if value not in allowed:
        raise UserError(f"{d.get('model_type')} config {key}={value!r} has no equivalent here; "
                         f"supported: {' or '.join(map(repr, allowed))}")


def first_id(value: int | list[int] | None) -> int | None:
    """Hugging Face allows a list of ids (e.g. several eos tokens); we keep the first."""
    return (value or [None])[0] if isinstance(value, list) else value
