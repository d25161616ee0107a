"""models/init.py: the statistics each initialisation promises, measured on large enough tensors that a
wrong std (off by sqrt(2 L), or the wrong kind) lands far outside the tolerance."""

import math

import pytest
import torch
from torch import nn

from tformer.config import InitConfig
from tformer.models.init import init_weights
from tformer.models.presets import build_model, preset

D, M, VOCAB, LAYERS = 256, 1024, 2000, 6


def block() -> nn.Module:
    """The parameter names init_weights looks at, with biases and norms filled with junk first."""
    parts = nn.ModuleDict(
        {
            "embed": nn.Embedding(VOCAB, D),
            "fc_in": nn.Linear(D, M),
            "fc_out": nn.Linear(M, D),
            "out_proj": nn.Linear(D, D),
            "down_proj": nn.Linear(M, D, bias=False),
            "norm": nn.LayerNorm(D),
            "rms": nn.RMSNorm(D),
        }
    )
    with torch.no_grad():
        for p in parts.parameters():
            p.fill_(3.0)
    return parts


def std(t: torch.Tensor) -> float:
    return t.float().std().item()


def assert_biases_and_norms_reset(parts: nn.ModuleDict) -> None:
    for name in ("fc_in", "fc_out", "out_proj"):
        assert torch.count_nonzero(parts[name].bias) == 0, name
    assert torch.equal(parts["norm"].weight, torch.ones(D))
    assert torch.count_nonzero(parts["norm"].bias) == 0
    assert torch.equal(parts["rms"].weight, torch.ones(D))


def test_xavier_uniform_weights_and_unit_scale_embeddings() -> None:
    parts = block()
    init_weights(parts, InitConfig(kind="xavier"), n_layers=LAYERS)
    # Embeddings: normal(0, d^-1/2), so that x sqrt(d) they enter at unit scale.
    assert std(parts["embed"].weight) == pytest.approx(D**-0.5, rel=0.02)
    assert abs(parts["embed"].weight.mean().item()) < 3e-3
    # Linear weights: uniform(-b, b) with b = sqrt(6 / (fan_in + fan_out)), so std = b / sqrt(3).
    for name, fan_in, fan_out in (("fc_in", D, M), ("fc_out", M, D), ("out_proj", D, D)):
        w = parts[name].weight
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert w.abs().max().item() <= bound, name
        assert w.abs().max().item() > 0.99 * bound, name  # uniform fills its range
        assert std(w) == pytest.approx(bound / math.sqrt(3), rel=0.03), name
    assert_biases_and_norms_reset(parts)


@pytest.mark.parametrize("scaled", [False, True])
def test_normal_with_and_without_scaled_residual(scaled: bool) -> None:
    parts = block()
    init_weights(parts, InitConfig(kind="normal", std=0.05, scaled_residual=scaled), n_layers=LAYERS)
    writers = 0.05 / math.sqrt(2 * LAYERS) if scaled else 0.05
    for name in ("fc_out", "out_proj", "down_proj"):  # they write into the residual stream
        assert std(parts[name].weight) == pytest.approx(writers, rel=0.03), name
    for name in ("embed", "fc_in"):  # they do not
        assert std(parts[name].weight) == pytest.approx(0.05, rel=0.03), name
    assert_biases_and_norms_reset(parts)


def test_each_family_applies_its_initialisation_when_built() -> None:
    torch.manual_seed(0)
    gpt = build_model(preset("gpt-tiny", dict(d_model=128, d_ff=512, n_layers=2)))
    # GPT: normal(0.02) with the residual writers scaled by 1 / sqrt(2 L) = 1/2.
    out = torch.cat([m.weight.flatten() for n, m in gpt.named_modules() if n.endswith("out_proj")])
    assert std(out) == pytest.approx(0.02 / 2, rel=0.05)
    # The paper's translator: Xavier-uniform, so a d x d projection has std b / sqrt(3), b = sqrt(6 / 2d).
    s2s = build_model(preset("transformer-tiny", dict(d_model=128, d_ff=512)))
    projections = [m.weight for m in s2s.modules() if isinstance(m, nn.Linear) and m.weight.shape == (128, 128)]
    assert projections
    assert std(torch.cat([w.flatten() for w in projections])) == pytest.approx(
        math.sqrt(6 / 256) / math.sqrt(3), rel=0.05
    )


@pytest.mark.parametrize("kind", ["xavier", "normal"])
def test_zero_residual_zeroes_only_the_residual_writers(kind: str) -> None:
    parts = block()
    init_weights(parts, InitConfig(kind=kind, std=0.05, zero_residual=True), n_layers=LAYERS)
    for name in ("fc_out", "out_proj", "down_proj"):
        assert torch.count_nonzero(parts[name].weight) == 0, name
    assert std(parts["fc_in"].weight) > 0.03 and std(parts["embed"].weight) > 0.03
    assert_biases_and_norms_reset(parts)


def test_a_zero_residual_pre_ln_translator_starts_as_embeddings_to_output() -> None:
    torch.manual_seed(0)
    model = build_model(preset("transformer-tiny", dict(
        vocab_size=50, d_model=32, d_ff=64, n_heads=2, n_layers=2, norm={"placement": "pre"},
        init={"zero_residual": True}))).eval()
    src, tgt = torch.randint(3, 50, (2, 7)), torch.randint(3, 50, (2, 5))
    logits = model(src, tgt)
    other = model(torch.randint(3, 50, (2, 7)), tgt)  # another source: no path from it to the output yet
    assert torch.equal(logits, other)
    logits.sum().backward()
    writers = [m.weight for n, m in model.named_modules()
               if n.startswith("decoder") and n.endswith(("out_proj", "fc_out"))]
    assert len(writers) == 6 and all(w.grad.abs().sum() > 0 for w in writers)  # they learn from the first step
