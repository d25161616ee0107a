"""nn/alignment.py: each MATCH function's attention step against its formula written out score by score
(Luong et al. 2015's dot and general, Bahdanau et al. 2015's additive, a scaled cosine), padding left out of
the softmax, and the weights a recording step keeps."""

from __future__ import annotations

import math

import pytest
import torch

from tformer.nn.alignment import AdditiveMatch, Alignment, CosineMatch, DotMatch, GeneralMatch

B, T, S, D = 2, 3, 5, 6


@torch.no_grad()
def formula(kind: str, match: torch.nn.Module, z: torch.Tensor, h: torch.Tensor) -> float:
    """MATCH(z, h) for one decoder state z (D,) and one encoder state h (D,), as the papers write it."""
    if kind == "dot":
        return float(z @ h)
    if kind == "general":
        return float(z @ (match.w.weight @ h))
    if kind == "additive":
        w, u, v = match.w_z.weight, match.w_h.weight, match.v.weight[0]
        return float(v @ torch.tanh(w @ z + u @ h))
    return float(match.sharpness) * float(z @ h) / (float(z.norm()) * float(h.norm()))


MATCHES = {"dot": lambda: DotMatch(), "general": lambda: GeneralMatch(d_model=D),
           "additive": lambda: AdditiveMatch(d_model=D), "cosine": lambda: CosineMatch(sharpness=3.0)}


@pytest.mark.parametrize("kind", MATCHES)
def test_each_match_step_is_its_formula(kind: str) -> None:
    torch.manual_seed(0)
    alignment = Alignment(match=MATCHES[kind](), d_model=D)
    z, h = torch.randn(B, T, D), torch.randn(B, S, D)
    valid = torch.tensor([[True] * S, [True, True, True, False, False]])  # the second source is 3 tokens long
    context, alpha = alignment(z, alignment.keys(h), h, valid)
    for b in range(B):
        n = int(valid[b].sum())
        for t in range(T):
            scores = [formula(kind, alignment.match, z[b, t], h[b, s]) for s in range(n)]
            top = max(scores)
            weights = [math.exp(e - top) for e in scores]
            weights = [w / sum(weights) for w in weights]  # softmax over the real positions only
            assert alpha[b, t, :n].tolist() == pytest.approx(weights, abs=1e-6)
            assert alpha[b, t, n:].abs().sum() == 0  # padding gets no weight
            expected = sum(w * h[b, s] for s, w in enumerate(weights))
            assert torch.allclose(context[b, t], expected, atol=1e-6)  # c = sum_s alpha_s h_s


def test_recording_appends_each_step_along_the_queries() -> None:
    torch.manual_seed(0)
    alignment = Alignment(match=DotMatch(), d_model=D)
    z, h, valid = torch.randn(B, T, D), torch.randn(B, S, D), torch.ones(B, S, dtype=torch.bool)
    _, whole = alignment(z, h, h, valid)
    assert alignment.weights is None  # kept only while recording
    alignment.record_weights = True
    for t in range(T):  # a decoder that attends one step at a time
        alignment(z[:, t : t + 1], h, h, valid)
    assert alignment.weights.shape == (B, 1, T, S)
    assert torch.allclose(alignment.weights[:, 0], whole)


@pytest.mark.parametrize("kind", MATCHES)
def test_beams_sharing_a_source_read_it_as_if_each_had_its_own(kind: str) -> None:
    torch.manual_seed(0)
    alignment = Alignment(match=MATCHES[kind](), d_model=D)
    beams = 3
    z, h = torch.randn(B * beams, T, D), torch.randn(B, S, D)  # rows 0-2 read source 0, rows 3-5 source 1
    valid = torch.tensor([[True] * S, [True, True, True, False, False]])
    shared = alignment(z, alignment.keys(h), h, valid)
    h_each, valid_each = h.repeat_interleave(beams, 0), valid.repeat_interleave(beams, 0)
    each = alignment(z, alignment.keys(h_each), h_each, valid_each)
    for got, expected in zip(shared, each, strict=True):
        assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-6)
    with pytest.raises(ValueError, match="6 rows of decoder states cannot share keys of 4 rows"):
        alignment(z, alignment.keys(h_each[:4]), h_each[:4], valid_each[:4])
