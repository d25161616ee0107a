"""models/builders.py: the position tables attention applies inside are built once per stack, and the
state-dict keys of every preset (public API: checkpoints depend on them, so they never change silently) are
those recorded before the builders moved out of models/stacks.py and nn/."""

from __future__ import annotations

import hashlib

import pytest
import torch

import tformer
from tformer.models.builders import build_mixer
from tformer.models.presets import PRESETS

# preset -> (number of keys, sha256 of the keys joined by newlines, first 16 hex digits), recorded on the
# tree before the move (commit 02bc758), and re-pinned deliberately in issue 17 when a layer's `self_attn.*`
# and `attn_norm.*` became `mixer.*` and `mixer_norm.*` (with those two renamed back, the keys give the
# digests of 02bc758; old checkpoints load through `tformer.checkpoints.RENAMED`).
KEYS = {
    "transformer-base": (255, "e0ed4585968e3e4b"), "transformer-big": (255, "e0ed4585968e3e4b"),
    "transformer-tiny": (87, "6d12d3d215a046ed"), "bert-base": (207, "5bd94bdce21d4116"),
    "bert-tiny": (47, "6ccdca5876739422"), "gpt2-small": (197, "dd3f533833533d1c"),
    "gpt-tiny": (37, "2401165f70d1d1c4"), "llama-tiny": (21, "d1744bba9e9d1dc9"),
    "rnn-small": (27, "cd3afcb93e956ab3"), "rnn-attention-small": (29, "c6af977f8d51f24a"),  # issue 35
}


@pytest.mark.parametrize("name", PRESETS)
def test_state_dict_keys_of_the_presets_are_unchanged(name: str) -> None:
    with torch.device("meta"):  # the keys only: no memory, no initialisation
        keys = list(tformer.build_model(tformer.preset(name)).state_dict())
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
    assert (len(keys), digest) == KEYS[name], f"{name}: the state-dict keys changed; now {keys}"


@pytest.mark.parametrize(("family", "kind", "attr"), [("gpt-tiny", "rope", "rotary"), ("gpt-tiny", "alibi", "alibi"),
                                                      ("transformer-tiny", "rope", "rotary"),
                                                      ("transformer-tiny", "alibi", "alibi")])
def test_attention_positions_are_built_once_per_stack(family: str, kind: str, attr: str) -> None:
    model = tformer.build_model(tformer.preset(family, {"positions": {"kind": kind}, "n_layers": 3}))
    stacks = [model.decoder] if family.startswith("gpt") else [model.encoder, model.decoder]
    tables = []
    for stack in stacks:
        shared = {id(getattr(layer.mixer, attr)) for layer in stack.layers}
        assert len(shared) == 1 and getattr(stack.layers[0].mixer, attr) is not None
        tables.append(getattr(stack.layers[0].mixer, attr))
        assert all(getattr(layer, "cross_attn", None) is None or getattr(layer.cross_attn, attr) is None
                   for layer in stack.layers)  # cross-attention has no positions
    assert len({id(t) for t in tables}) == len(stacks)  # one per stack, not one per model


def test_a_mixer_built_alone_has_its_own_positions() -> None:
    mixer = build_mixer(tformer.preset("gpt-tiny", {"positions": {"kind": "rope"}}), causal=True)
    assert mixer.rotary is not None and mixer.alibi is None
