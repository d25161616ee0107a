"""Int8 weight quantization for inference on the CPU, at load time: `quantize(model, "int8")`.

Each large enough `nn.Linear` becomes an `Int8Linear`: its weight W (N, K) stored as int8 with one fp32 scale
per output row (symmetric, per channel), its bias kept in fp32, and its product computed by PyTorch's own
dynamic-quantized kernel (`torch.ops.quantized.linear_dynamic`, FBGEMM on x86): each call quantizes the
activations to uint8 (one scale for the whole input, from its range), multiplies in int8 with int32
accumulation, and returns fp32. That kernel was chosen by measurement over `aten._weight_int8pack_mm` (many
times slower than fp32) and an inductor-compiled dequantize-then-matmul (slower than fp32 too):
`benchmarks/int8_kernels.py`, measured in docs/int8.md and docs/results.md, "Timings behind choices in the code".

Stays fp32: embeddings, norms, positions, attention kernels' own projections (a low-rank kernel reads their
weights directly), and every linear layer with fewer than `min_weights` weights (default `MIN_WEIGHTS`): the
int8 kernel's fixed costs (quantizing the input, packing) lose to fp32 on small products, measured on this
project's shapes. A tied output projection gets its own int8 copy; the embedding it shares keeps fp32.

Checkpoints stay fp32: quantization happens in memory after loading, and an `Int8Linear` has no trainable
parameters (its packed weight is not in the state dict), so a quantized model is for inference only.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from tformer.errors import UserError

MODES = ("int8",)
# Layers with fewer weights than this stay fp32. 0 quantizes every linear layer: the int8 kernel can lose to
# fp32 on small products of one to eight rows, but whole models gain, because the products that dominate their
# time (output layer, feed-forward layers, beam search's many rows) are those it wins on (docs/int8.md).
MIN_WEIGHTS = 0


def check_mode(mode: str) -> str:
    """`mode` if it is a quantization this module does, else a ValueError naming the allowed ones."""
    if mode not in MODES:
        raise UserError(f"unknown quantization {mode!r}; allowed: {', '.join(MODES)}")
    return mode


class Int8Linear(nn.Module):
    """y = x W^T + b with W int8 per output channel and x quantized per call; x (..., K) fp32 -> (..., N)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.has_bias = linear.bias is not None
        self.shares_weight = False  # set by `quantize` when the fp32 weight stays in the model (a tied output)
        w = linear.weight.detach().float()  # (N, K)
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12).double()  # (N,) symmetric: zero point 0
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        with warnings.catch_warnings():  # torch marks the quantized tensor type deprecated; its kernels remain
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(q, bias)

    def forward(self, x: Tensor) -> Tensor:
        # reduce_range: 7-bit activations, which FBGEMM needs on CPUs without VNNI to avoid overflow
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)

    def numel(self) -> int:
        """The trained numbers it adds to the model, as the nn.Linear it replaced counted them (they are packed,
        not parameters); a weight tied to one the model still holds counts there, not here."""
        weights = 0 if self.shares_weight else self.in_features * self.out_features
        return weights + (self.out_features if self.has_bias else 0)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per channel"


def quantizable(name: str, module: nn.Module, min_weights: int) -> bool:
    """Whether the linear layer at `name` becomes int8: not inside an attention kernel, big enough."""
    return (isinstance(module, nn.Linear) and "kernel" not in name.split(".")
            and module.weight.numel() >= min_weights)


def quantize(model: nn.Module, mode: str = "int8", *, min_weights: int | None = None) -> nn.Module:
    """`model` (on the CPU, in eval mode) with its linear layers of at least `min_weights` weights (None:
    `MIN_WEIGHTS`) replaced,
    in place, by `Int8Linear`; returns it. A model on another device, or not in fp32, is refused: the kernel
    is CPU-only and takes fp32 activations."""
    check_mode(mode)
    devices = {p.device.type for p in model.parameters()}
    if devices - {"cpu"}:
        raise UserError(f"int8 quantization runs on the CPU only; the model is on {', '.join(sorted(devices))}")
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} - {torch.float32}
    if dtypes:
        raise UserError(f"int8 quantization starts from an fp32 model; this one holds "
                         f"{', '.join(sorted(str(d).removeprefix('torch.') for d in dtypes))}")
    min_weights = MIN_WEIGHTS if min_weights is None else min_weights
    targets = [(name, m) for name, m in model.named_modules() if quantizable(name, m, min_weights)]
    weight_of = {}  # each new layer -> id of the fp32 weight it replaced
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layer = Int8Linear(linear)
        weight_of[layer] = id(linear.weight)
        setattr(parent, child, layer)
    kept = {id(p) for p in model.parameters()}  # e.g. the embedding a quantized output layer was tied to
    for layer, weight in weight_of.items():
        layer.shares_weight = weight in kept
    return model.eval()


def count_int8(model: nn.Module) -> int:
    """How many layers of `model` are `Int8Linear`."""
    return sum(isinstance(m, Int8Linear) for m in model.modules())


__all__ = ["MIN_WEIGHTS", "MODES", "Int8Linear", "check_mode", "count_int8", "quantize"]
