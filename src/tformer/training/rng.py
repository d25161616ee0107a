"""The random generators training draws from, saved and restored as plain data, so that a resumed run
draws what the uninterrupted one would have: python `random` (data shuffling), numpy, torch CPU (dropout,
masking) and each CUDA device. A checkpoint's trainer.pt holds them (`checkpoint.py`)."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_states() -> dict:
    """The states of every generator training draws from: python `random` (data shuffling), numpy, torch
    CPU (dropout, masking) and each CUDA device. Plain types and tensors, so `torch.load` needs no
    pickled classes."""
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict) -> None:
    """Restore what `rng_states` returned (CUDA devices: as many as both the saved and this machine have)."""
    python = states["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    n = states["numpy"]
    np.random.set_state({
        "bit_generator": "MT19937",
        "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
        "has_gauss": n["has_gauss"], "gauss": n["gauss"],
    })
    torch.set_rng_state(states["torch"])
    if torch.cuda.is_available():
        for device, cuda_state in enumerate(states["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, device)


__all__ = ["rng_states", "set_rng_states"]
