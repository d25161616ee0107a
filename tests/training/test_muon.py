"""optim.name=muon: Muon over the hidden weight matrices, Adam over the rest, one optimizer to the loop."""

import pytest
import torch
from torch import nn

from tests.training.test_precision import losses, same_weights, train
from tests.training.test_training_numerics import TinyLM
from tformer.errors import UserError
from tformer.models.presets import build_model, preset
from tformer.training import optim
from tformer.training.optim import MuonWithAdam, OptimConfig, build_optimizer, muon_matrices
from tformer.training.schedules import ScheduleConfig, build_scheduler


def tiny(name: str, **overrides) -> nn.Module:  # noqa: ANN003
    torch.manual_seed(0)
    return build_model(preset(name, dict(vocab_size=50, d_model=16, d_ff=32, n_heads=2, n_layers=1, max_len=16,
                                         **overrides)))


@pytest.mark.parametrize("name", ["transformer-tiny", "gpt-tiny", "bert-tiny", "llama-tiny"])
@pytest.mark.parametrize("tied", [True, False])
def test_muon_takes_hidden_matrices_and_adam_the_rest(name: str, tied: bool) -> None:
    model = tiny(name, tie_embeddings=tied)
    opt = build_optimizer(model, OptimConfig(name="muon", lr=0.02))
    assert isinstance(opt, MuonWithAdam)
    names = {id(p): n for n, p in model.named_parameters()}
    in_muon = [names[id(p)] for g in opt.muon.param_groups for p in g["params"]]
    in_adam = [names[id(p)] for g in opt.adam.param_groups for p in g["params"]]
    assert sorted(in_muon + in_adam) == sorted(names.values())  # every parameter once, in one of the two
    assert in_muon and all(n.endswith("weight") and "embed" not in n and "norm" not in n for n in in_muon)
    assert any("tokens" in n for n in in_adam)  # the embedding (and a tied output layer with it)
    shape = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert not any(50 in shape[n] for n in in_muon)  # an untied output layer (vocab 50 x d) is Adam's too
    assert [g["lr"] for g in opt.param_groups] == [0.02] * len(opt.param_groups)


def test_a_schedule_sets_the_rate_both_parts_step_with() -> None:
    model = tiny("gpt-tiny")
    opt = build_optimizer(model, OptimConfig(name="muon", lr=0.01))
    sched = build_scheduler(opt, ScheduleConfig(name="cosine", warmup=2, total_steps=10), d_model=16, lr=0.01)
    model(torch.randint(1, 50, (2, 8))).float().pow(2).mean().backward()
    opt.step()
    sched.step()
    rates = {g["lr"] for g in opt.muon.param_groups} | {g["lr"] for g in opt.adam.param_groups}
    assert rates == {0.01}  # warm-up step 2 of 2: the peak, in Muon's groups and Adam's alike


def test_muon_update_is_orthogonalised() -> None:
    """One step from zero momentum on one matrix: the update's singular values are all about equal (the
    Newton-Schulz iteration maps them into roughly [0.7, 1.2]), however spread the gradient's are."""
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(32, 16, bias=False))
    opt = build_optimizer(layer, OptimConfig(name="muon", lr=0.1, momentum=0.0))
    before = layer[0].weight.detach().clone()
    u, _ = torch.linalg.qr(torch.randn(16, 16))
    v, _ = torch.linalg.qr(torch.randn(32, 16))
    g = u @ torch.diag(torch.linspace(1.0, 20.0, 16)) @ v.T  # singular values 1 .. 20
    layer[0].weight.grad = g
    opt.step()
    s = torch.linalg.svdvals(before - layer[0].weight.detach())
    assert s.max() / s.min() < 2.0  # the gradient's 20x spread is gone
    assert torch.linalg.svdvals(g).max() / torch.linalg.svdvals(g).min() > 19


def test_muon_trains_and_resumes_bitwise(tmp_path) -> None:  # noqa: ANN001
    lengths = [5, 7, 4, 6, 9, 3]
    conf = dict(optim=OptimConfig(name="muon", lr=2e-2))
    whole = train(tmp_path / "whole", TinyLM(lengths, per_batch=2), max_steps=6, **conf)
    train(tmp_path / "cut", TinyLM(lengths, per_batch=2), max_steps=3, **conf)
    resumed = train(tmp_path / "cut", TinyLM(lengths, per_batch=2), resume=True, max_steps=6, **conf)
    assert same_weights(whole, resumed)
    assert losses(tmp_path / "whole") == losses(tmp_path / "cut")
    learned = train(tmp_path / "long", TinyLM([9] * 16, per_batch=4), max_steps=40, **conf)
    assert losses(tmp_path / "long")[-1] < 0.7 * losses(tmp_path / "long")[0]
    assert learned is not None


def test_resuming_an_adam_run_with_muon_is_refused(tmp_path) -> None:  # noqa: ANN001
    train(tmp_path / "run", TinyLM([5, 7], per_batch=1), max_steps=2)
    with pytest.raises(UserError, match="not Muon's"):
        train(tmp_path / "run", TinyLM([5, 7], per_batch=1), resume=True, max_steps=4,
              optim=OptimConfig(name="muon", lr=2e-2))


def test_muon_needs_no_torch_optim_muon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(optim.torch.optim, "Muon")  # as on torch < 2.9
    layer = nn.Linear(32, 16, bias=False)
    opt = build_optimizer(layer, OptimConfig(name="muon", lr=0.1))
    before = layer.weight.detach().clone()
    layer(torch.randn(4, 32)).square().sum().backward()
    opt.step()
    assert opt.muon.param_groups[0]["params"] == [layer.weight]
    assert not torch.equal(before, layer.weight)


@pytest.mark.parametrize("momentum", [-0.1, 1.0, float("nan")])
def test_bad_momentum_is_refused(momentum: float) -> None:
    with pytest.raises(UserError, match="optim.momentum"):
        OptimConfig(name="muon", momentum=momentum)


def test_muon_matrices_skip_a_layer_shaped_like_the_embedding() -> None:
    model = tiny("gpt-tiny", tie_embeddings=False)
    shapes = {tuple(p.shape) for p in muon_matrices(model)}
    assert (50, 16) not in shapes and shapes


@pytest.mark.parametrize("rule", ["match_rms_adamw", "original"])
@pytest.mark.parametrize("nesterov", [True, False])
def test_batched_muon_steps_exactly_as_torch_muon(rule: str, nesterov: bool) -> None:
    from tformer.training.muon import BatchedMuon

    torch.manual_seed(0)
    shapes = [(16, 16)] * 3 + [(16, 48)] * 2 + [(48, 16)] * 2 + [(8, 24)]  # wide, tall, and a shape alone
    ours = [nn.Parameter(torch.randn(*s) * 0.1) for s in shapes]
    theirs = [nn.Parameter(p.detach().clone()) for p in ours]
    start = [p.detach().clone() for p in ours]
    kw = dict(lr=0.02, weight_decay=0.1, nesterov=nesterov, adjust_lr_fn=rule)
    batched, reference = BatchedMuon(ours, **kw), torch.optim.Muon(theirs, **kw)
    for _ in range(3):
        for p, q in zip(ours, theirs, strict=True):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        batched.step()
        reference.step()
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True))
    assert not any(torch.allclose(p, s) for p, s in zip(ours, start, strict=True))  # every matrix moved
    mine, torchs = batched.state_dict(), reference.state_dict()
    assert all(torch.equal(mine["state"][i]["momentum_buffer"], torchs["state"][i]["momentum_buffer"])
               for i in range(len(shapes)))
