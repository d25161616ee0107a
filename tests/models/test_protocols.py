"""models/protocols.py: the Transformer and the RNN encoder-decoder are both `Translator`s, by their members
(`isinstance`) and by their signatures, and a tiny one of each decodes through the protocol's methods alone:
one position at a time with `new_caches` gives the logits of decoding the whole prefix, and of `forward`."""

from __future__ import annotations

import inspect

import pytest
import torch

import tformer
from tformer.models import EncoderDecoder, RNNEncoderDecoder
from tformer.models.protocols import Translator, TranslatorConfig

V = 40
METHODS = ("encode", "decode", "new_caches", "forward")

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(family: str) -> Translator:
    """A tiny Transformer, or an RNN with attention, in eval mode."""
    if family == "seq2seq":
        config = tformer.preset("transformer-tiny", {"vocab_size": V, "d_model": 16, "d_ff": 32, "n_heads": 2,
                                                     "n_layers": 1, "max_len": 32})
    else:
        config = tformer.preset("rnn-attention-small", {"vocab_size": V, "d_model": 12, "n_layers": 1, "max_len": 32})
    return tformer.build_model(config).eval()


FAMILIES = {"seq2seq": EncoderDecoder, "rnn": RNNEncoderDecoder}


@pytest.mark.parametrize("family", FAMILIES)
def test_both_encoder_decoders_are_translators(family: str) -> None:
    model = tiny(family)
    assert isinstance(model, FAMILIES[family])
    assert isinstance(model, Translator) and isinstance(model.config, TranslatorConfig)
    for name in METHODS:  # the protocol's parameters in order, by name, kind and default; any other has a default
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(Translator, name)).parameters.values()]
        have = inspect.signature(getattr(FAMILIES[family], name)).parameters.values()
        assert [(p.name, p.kind, p.default) for p in have if p.name in {w[0] for w in want}] == want, name
        assert all(p.default is not p.empty for p in have if p.name not in {w[0] for w in want}), name


def test_a_gpt_is_no_translator() -> None:
    assert not isinstance(tformer.build_model(tformer.preset("gpt-tiny")), Translator)


def step_by_step(model: Translator, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, V) of the decoder inputs `tgt` (B, T), fed one position at a time through the caches."""
    valid = src != model.config.pad_id  # (B, S)
    memory = model.encode(src, valid)
    caches = model.new_caches(src.shape[0], tgt.shape[1])
    steps = [model.decode(tgt[:, t:t + 1], memory, valid, caches=caches, offset=t) for t in range(tgt.shape[1])]
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_through_the_protocol(family: str) -> None:
    model = tiny(family)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, V, (2, 6), generator=g)
    src[1, 4:] = model.config.pad_id
    tgt = torch.randint(3, V, (2, 5), generator=g)
    tgt[:, 0] = model.config.decoder_start_id
    with torch.no_grad():
        whole = model.decode(tgt, model.encode(src), src != model.config.pad_id)  # (B, T, V)
        assert whole.shape == (2, 5, model.config.vocab_size)
        assert torch.allclose(model.forward(src, tgt), whole, atol=1e-6)
        assert torch.allclose(step_by_step(model, src, tgt), whole, atol=1e-5)
