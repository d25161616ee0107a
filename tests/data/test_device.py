"""Batches moved to the model's device: `to_device` rebuilds dataclasses, named tuples, lists and dicts with
their tensors moved and other values kept; `resolve_device` reads auto / cpu / cuda[:N]."""

from dataclasses import dataclass
from typing import NamedTuple

import pytest
import torch

from tformer.data.batching import Batch
from tformer.data.device import device_of, resolve_device, to_device


class Pair(NamedTuple):
    ids: torch.Tensor
    label: int


@dataclass(frozen=True)
class Nested:
    pair: Pair
    extra: dict
    names: list


def test_to_device_rebuilds_containers_and_keeps_plain_values() -> None:
    batch = Batch(src=torch.ones(2, 3), tgt_in=torch.zeros(2, 4), tgt_out=torch.zeros(2, 4), n_target_tokens=7)
    moved = to_device(batch, "meta")  # the meta device: a real move without a GPU
    assert isinstance(moved, Batch) and moved.n_target_tokens == 7
    assert {t.device.type for t in (moved.src, moved.tgt_in, moved.tgt_out)} == {"meta"}
    nested = Nested(Pair(torch.ones(2), 3), {"w": torch.zeros(1), "n": 1}, [torch.ones(1), "x"])
    out = to_device(nested, "meta")
    assert isinstance(out.pair, Pair) and out.pair.label == 3 and out.pair.ids.is_meta
    assert out.extra["w"].is_meta and out.extra["n"] == 1 and out.names[0].is_meta and out.names[1] == "x"
    same = to_device(batch, "cpu")
    assert same.src is batch.src  # already there: nothing copied


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="train.device='cuda:1' but torch sees no GPU here"):
            resolve_device("cuda:1")
    assert device_of(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert device_of(torch.nn.ReLU()) == torch.device("cpu")  # no parameters
