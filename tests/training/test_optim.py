"""Optimisers: the paper's Adam settings, weight decay only on weight matrices, L2 vs decoupled decay."""

import pytest
import torch
from torch import nn

from tformer.models.presets import build_model, preset
from tformer.training.optim import OptimConfig, build_optimizer, param_groups


def tiny(name: str) -> nn.Module:
    torch.manual_seed(0)
    return build_model(preset(name, dict(vocab_size=50, d_model=16, d_ff=32, n_heads=2, n_layers=1,
                                         max_len=16)))


def test_defaults_are_the_papers_adam():
    config = OptimConfig()
    opt = build_optimizer(tiny("gpt-tiny"), config)
    assert isinstance(opt, torch.optim.Adam) and not isinstance(opt, torch.optim.AdamW)
    for group in opt.param_groups:
        assert group["betas"] == (0.9, 0.98)
        assert group["eps"] == 1e-9
        assert group["lr"] == 1.0


@pytest.mark.parametrize("name", ["transformer-tiny", "bert-tiny", "gpt-tiny", "llama-tiny"])
def test_decay_only_on_matrices_and_tied_counted_once(name):
    model = tiny(name)
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() < 2 for p in no_decay["params"])
    ids = [id(p) for p in decay["params"] + no_decay["params"]]
    assert len(ids) == len(set(ids))  # a tied matrix appears once
    assert set(ids) == {id(p) for p in model.parameters()}  # and nothing is left out
    names = {id(p): n for n, p in model.named_parameters()}
    assert not any(names[id(p)].endswith("bias") for p in decay["params"])
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    assert any("tokens" in names[id(p)] for p in decay["params"])


def test_frozen_parameters_are_left_out():
    model = tiny("gpt-tiny")
    model.embed.tokens.weight.requires_grad_(False)
    decay, _ = param_groups(model, 0.1)
    assert all(p is not model.embed.tokens.weight for p in decay["params"])


def one_step(name: str, weight_decay: float) -> nn.Linear:
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    opt = build_optimizer(layer, OptimConfig(name=name, lr=0.1, weight_decay=weight_decay))
    torch.manual_seed(1)
    layer(torch.randn(5, 4)).pow(2).sum().backward()
    opt.step()
    return layer


def test_adam_decay_is_l2_on_the_gradient():
    """Adam with weight decay lambda equals plain Adam on the gradient g + lambda W (and leaves biases)."""
    wd = 0.5
    decayed = one_step("adam", wd)
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    w0 = layer.weight.detach().clone()
    opt = torch.optim.Adam(layer.parameters(), lr=0.1, betas=(0.9, 0.98), eps=1e-9)
    torch.manual_seed(1)
    layer(torch.randn(5, 4)).pow(2).sum().backward()
    layer.weight.grad += wd * w0
    opt.step()
    torch.testing.assert_close(decayed.weight, layer.weight, rtol=0, atol=1e-7)
    torch.testing.assert_close(decayed.bias, layer.bias, rtol=0, atol=1e-7)


def test_adamw_decay_is_decoupled():
    """AdamW = the undecayed Adam step, then W -= lr * lambda * W_old; biases untouched."""
    wd, lr = 0.5, 0.1
    torch.manual_seed(0)
    w0 = nn.Linear(4, 3).weight.detach().clone()
    plain, decayed = one_step("adamw", 0.0), one_step("adamw", wd)
    torch.testing.assert_close(decayed.weight, plain.weight - lr * wd * w0, rtol=0, atol=1e-7)
    assert torch.equal(decayed.bias, plain.bias)
    assert not torch.allclose(one_step("adam", wd).weight, decayed.weight)


@pytest.mark.parametrize("field,value", [
    ("name", "sgd"), ("lr", 0.0), ("betas", (0.9, 1.0)), ("eps", 0.0), ("weight_decay", -1.0),
    ("clip_norm", 0.0),
])
def test_bad_values_are_named(field, value):
    with pytest.raises(ValueError, match=f"optim.{field}="):
        OptimConfig(**{field: value})


def test_betas_from_yaml_list_become_a_tuple():
    from tformer.config import from_dict

    config = from_dict(OptimConfig, {"betas": [0.9, 0.999], "clip_norm": None})
    assert config.betas == (0.9, 0.999) and config.clip_norm is None


def test_state_space_time_constants_are_not_decayed() -> None:
    from tformer.nn.ssm import SSMMixer

    mixer = SSMMixer(d_model=8, state=4, expand=2, conv=3, chunk=4, bidirectional=False)
    decayed, kept = param_groups(mixer, 0.1)
    assert any(p is mixer.forward_ssm.A_log for p in kept["params"])
    assert not any(p is mixer.forward_ssm.A_log for p in decayed["params"])
    assert any(p is mixer.in_proj.weight for p in decayed["params"])
