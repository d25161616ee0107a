"""Optimisers: Adam as in the paper (Vaswani et al. 2017, sec. 5.3: beta1 0.9, beta2 0.98, eps 1e-9) or
AdamW (Loshchilov & Hutter 2019, https://arxiv.org/abs/1711.05101), with weight decay on weight matrices
only.

Weight decay is the L2 penalty of the notes, (lambda / 2) ||W||^2, added to the loss of the weight
matrices (Linear weights and embeddings) and never to biases or norm gains: those set offsets and scales,
and pulling them to zero only fights the model. "adam" adds lambda W to the gradient (classic L2, which
Adam then rescales per coordinate); "adamw" decouples it, shrinking W by lr * lambda * W after the Adam
step, so that every weight decays at the same rate.

"muon" (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/) steps the hidden weight matrices
(every Linear layer's weight but the output layer's) as `torch.optim.Muon` defines it, on any torch
(training/muon.py, which batches the iterations over matrices of one shape): momentum, then the update matrix
orthogonalised by five Newton-Schulz iterations, so that every direction of a matrix moves by the same amount;
its rate is scaled per matrix to the RMS of an AdamW update (Liu et al. 2025, "Muon is scalable"), so one
`lr` serves both. Embeddings, the output layer, biases and norm gains, which Muon is not meant for, take Adam
(betas, eps) at the same rate; weight decay is decoupled for both parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tformer.configio import check_finite
from tformer.errors import UserError
from tformer.training.muon import BatchedMuon

OPTIMIZERS = ("adam", "adamw", "muon")


@dataclass(kw_only=True)
class OptimConfig:
    """`lr` is the base learning rate the schedule scales: the factor of the paper's schedule (which supplies
    d^-0.5 itself, so 1.0 is the paper), or the peak of the cosine and constant schedules.
    `clip_norm` is the largest global gradient norm before a step (None: no clipping); the loop applies it."""

    name: str = "adam"
    lr: float = 1.0
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float | None = 1.0
    momentum: float = 0.95  # muon only: the momentum of its matrix updates (Nesterov)

    def __post_init__(self) -> None:
        check_finite(self, where="optim.")
        if self.name not in OPTIMIZERS:
            allowed = ", ".join(OPTIMIZERS)
            raise UserError(f"optim.name={self.name!r} is not allowed; choose one of {allowed}")
        if not self.lr > 0:
            raise UserError(f"optim.lr={self.lr!r} must be > 0")
        betas = tuple(self.betas)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise UserError(f"optim.betas={self.betas!r} must be two numbers in [0, 1)")
        self.betas = (float(betas[0]), float(betas[1]))
        if not self.eps > 0:
            raise UserError(f"optim.eps={self.eps!r} must be > 0")
        if not self.weight_decay >= 0:
            raise UserError(f"optim.weight_decay={self.weight_decay!r} must be >= 0")
        if not 0.0 <= self.momentum < 1.0:
            raise UserError(f"optim.momentum={self.momentum!r} must be in [0, 1)")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise UserError(f"optim.clip_norm={self.clip_norm!r} must be > 0, or null for no clipping")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups of the trainable parameters: weight matrices and embeddings (dim >= 2) decayed with
    `weight_decay`, and biases and norm weights (dim < 2) not decayed, nor a matrix marked
    `no_weight_decay` (the state-space mixer's A_log: decay would pull every A = -exp(A_log) to -1). A
    tied parameter (the output layer sharing the embedding matrix) is one tensor and appears once. Both
    groups are always present, so that an optimizer's state dict has the same layout for every model
    (resuming relies on it)."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():  # named_parameters skips repeats of a shared tensor
        if p.requires_grad:
            (decay if p.dim() >= 2 and not getattr(p, "no_weight_decay", False) else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, config: OptimConfig) -> torch.optim.Optimizer:
    """Adam (weight decay as L2 on the gradient) or AdamW (decoupled weight decay) over `param_groups`,
    at base learning rate `config.lr`; a schedule from `build_scheduler` scales it every step."""
    if config.name == "muon":
        return build_muon(model, config)
    groups = param_groups(model, config.weight_decay)
    cls = torch.optim.Adam if config.name == "adam" else torch.optim.AdamW
    fused = fused_supported([p for g in groups for p in g["params"]]) or None
    return cls(groups, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay,
               fused=fused)


def muon_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The parameters Muon steps: the weights of the Linear layers, except a layer shaped like a token
    embedding (vocab x d: the output layer, tied or not), whose rows are per-token like an embedding's."""
    embedding_shapes = {m.weight.shape for m in model.modules() if isinstance(m, nn.Embedding)}
    seen, out = set(), []
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(m, nn.Linear) and w.requires_grad and w.shape not in embedding_shapes and id(w) not in seen:
            seen.add(id(w))
            out.append(w)
    return out


class MuonWithAdam(torch.optim.Optimizer):
    """One optimizer to the loop, the scheduler and the checkpoint: Muon over `matrices`, Adam over the rest.
    Its param_groups are the two optimizers' own group dicts (Muon's first), so a schedule setting a
    group's lr sets it where the step reads it."""

    def __init__(self, muon: torch.optim.Optimizer, adam: torch.optim.Optimizer) -> None:
        self.muon, self.adam = muon, adam
        super().__init__([*muon.param_groups, *adam.param_groups], {})  # the same dicts, not copies

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch's signature)
        loss = closure() if closure is not None else None
        self.muon.step()
        self.adam.step()
        return loss

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adam": self.adam.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if set(state_dict) != {"muon", "adam"}:
            raise UserError("the saved optimizer state is not Muon's (optim.name=muon): resume with the "
                            "optimizer the run was trained with")
        self.muon.load_state_dict(state_dict["muon"])
        self.adam.load_state_dict(state_dict["adam"])


def build_muon(model: nn.Module, config: OptimConfig) -> MuonWithAdam:
    """Muon over `muon_matrices(model)`, Adam over every other trainable parameter (decayed as
    `param_groups` decides), both at base rate `config.lr`."""
    matrices = muon_matrices(model)
    if any(type(p.data) is not torch.Tensor for p in matrices):
        raise UserError("optim.name=muon does not step sharded (FSDP) parameters; use adam or adamw with "
                        "FSDP, or data-parallel training")
    taken = {id(p) for p in matrices}
    rest = [{**g, "params": [p for p in g["params"] if id(p) not in taken]} for g in
            param_groups(model, config.weight_decay)]
    muon = BatchedMuon([{"params": matrices}], lr=config.lr, weight_decay=config.weight_decay,
                       momentum=config.momentum, adjust_lr_fn="match_rms_adamw")
    fused = fused_supported([p for g in rest for p in g["params"]]) or None
    adam = torch.optim.AdamW(rest, lr=config.lr, betas=config.betas, eps=config.eps, fused=fused)
    return MuonWithAdam(muon, adam)


def fused_supported(params: list[torch.Tensor]) -> bool:
    """Whether torch's fused Adam kernel takes these parameters: plain floating-point tensors on the CPU or a
    GPU (not sharded ones). It updates every parameter in one pass over memory, so it is faster than the
    per-parameter for-loop default (measured in docs/results.md, "Timings behind choices in the code")."""
    return bool(params) and all(type(p.data) is torch.Tensor and p.dtype.is_floating_point
                                and p.device.type in ("cpu", "cuda") for p in params)


__all__ = ["OPTIMIZERS", "MuonWithAdam", "OptimConfig", "build_muon", "build_optimizer", "fused_supported",
           "muon_matrices", "param_groups"]
