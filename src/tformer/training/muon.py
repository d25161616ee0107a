"""Muon with its Newton-Schulz iterations batched over matrices of one shape.

`torch.optim.Muon` orthogonalises each matrix on its own: for the demo's 48 small matrices (36 of 160 x 160,
12 of 160 x 640) that is 48 x 5 x 3 small bfloat16 matmuls a step, launched one by one. Stacking the
matrices of one shape into a (N, rows, cols) tensor runs the same iterations as one batched matmul per
product: a demo step's iterations take 21 ms instead of 44 on 2 CPU cores (docs/demo-recipe.md). Same
algorithm, arguments and state (a `momentum_buffer` per parameter, so checkpoints of either load into the
other), the same steps bit for bit (tests/training/test_muon.py), and no need for torch >= 2.9.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import Tensor


def orthogonalise(updates: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float) -> Tensor:
    """updates (N, A, B) -> about U V^T of each matrix (singular values pushed into ~[0.5, 1.5]), in bfloat16:
    the quintic Newton-Schulz iteration of Muon, on the wide orientation (A <= B) so the Gram matrix is small."""
    a, b, c = coefficients
    tall = updates.size(-2) > updates.size(-1)
    x = updates.bfloat16()
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.mT  # (N, A, A)
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b G + c G^2
        x = torch.baddbmm(x, poly, x, beta=a)  # a X + (b G + c G^2) X
    return x.mT if tall else x


def _rate_ratio(rule: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's per-matrix rate: "match_rms_adamw" scales to an AdamW update's RMS, 0.2 sqrt(max(A, B))
    (Liu et al. 2025); "original" (None) is sqrt(max(1, A / B))."""
    rows, cols = shape[0], shape[1]
    if rule == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return math.sqrt(max(1.0, rows / cols))


class BatchedMuon(torch.optim.Optimizer):
    """Muon (Jordan et al. 2024) as `torch.optim.Muon` (torch >= 2.9) defines it, with the same arguments,
    defaults and state, so that it runs on every torch tformer supports; its step orthogonalises all
    matrices of one shape together."""

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,  # noqa: ANN001
                 nesterov: bool = True, ns_coefficients: tuple[float, float, float] = (3.4445, -4.7750, 2.0315),
                 eps: float = 1e-7, ns_steps: int = 5, adjust_lr_fn: str | None = None) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)
        for group in self.param_groups:
            if any(p.dim() != 2 for p in group["params"]):
                raise ValueError("Muon steps 2-D weight matrices only")

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch's signature)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            updates = self._momentum(params, group["momentum"], nesterov=group["nesterov"])
            by_shape: dict[torch.Size, list[int]] = defaultdict(list)
            for i, p in enumerate(params):
                by_shape[p.shape].append(i)
            lr, decay = group["lr"], group["weight_decay"]
            for shape, idx in by_shape.items():
                stacked = torch.stack([updates[i] for i in idx])  # (N, A, B)
                ortho = orthogonalise(stacked, group["ns_coefficients"], group["ns_steps"], group["eps"])
                rate = lr * _rate_ratio(group["adjust_lr_fn"], shape)
                chosen = [params[i] for i in idx]
                if decay:
                    torch._foreach_mul_(chosen, 1 - lr * decay)
                torch._foreach_add_(chosen, list(ortho.unbind(0)), alpha=-rate)
        return loss

    def _momentum(self, params: list[Tensor], momentum: float, *, nesterov: bool) -> list[Tensor]:
        """Each matrix's momentum buffer B <- mu B + (1 - mu) g (made at its first step), and the update to
        orthogonalise: B, or with Nesterov g + mu (B - g)."""
        for p in params:
            if "momentum_buffer" not in self.state[p]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p)
        grads = [p.grad for p in params]
        buffers = [self.state[p]["momentum_buffer"] for p in params]
        torch._foreach_lerp_(buffers, grads, 1 - momentum)
        return torch._foreach_lerp(grads, buffers, momentum) if nesterov else buffers


__all__ = ["BatchedMuon", "orthogonalise"]
