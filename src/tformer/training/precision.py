"""Mixed precision for training (`train.precision`), and TF32 matmuls on a GPU.

    fp32  float32 throughout (on a CUDA GPU its matmuls use TF32 tensor cores: `tf32_matmuls`)
    bf16  torch.autocast with bfloat16: matmuls and attention run in bfloat16; the weights, gradients and
          optimizer state stay float32 (the "master" copy the update is applied to), and the loss is
          computed in float32 (`losses.py` casts the logits). bfloat16 keeps float32's exponent range,
          so no loss scaling is needed (Kalamkar et al. 2019, https://arxiv.org/abs/1905.12322)
    fp16  autocast with float16 and a loss scaler (torch.amp.GradScaler): float16's range is narrow
          (largest 65504, smallest normal 6e-5), so the loss is multiplied by a scale before backward,
          lest small gradients flush to zero, and the gradients divided by it before clipping and the
          update; a step whose scaled gradient overflowed is skipped and the scale halved (Micikevicius et
          al. 2018, https://arxiv.org/abs/1710.03740)
    auto  bf16 on a CUDA GPU that supports it (torch.cuda.is_bf16_supported: Ampere and later), else fp32

A setting the device cannot run is refused in one line: fp16 off a CUDA GPU (CPUs have bfloat16 matmul
units, AVX512-BF16 and AMX, but no fast float16 ones: use bf16 there), bf16 on a GPU without bfloat16,
and fp16 with FSDP (the scaler would check only this rank's shard of the gradients for overflow, so the
ranks' scales could part ways).

The loop skips a step whose loss or gradient norm is not finite and stops after train.max_bad_steps of them
in a row. Under fp16 an overflow of the scaled gradient is expected (the scale starts at 2**16 and is
halved until the gradients fit, and is doubled again after 2000 clean steps to probe for headroom), so such
a step is retried at the halved scale, like a bad step without counting as one: it does not advance the
step count or the schedule, and its micro-batches are not read again. Only while the scale is at least
MIN_SCALE: below it the gradient overflows without any scaling, which is a diverged run, and the step
counts as a bad one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

from tformer.errors import UserError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
FP16_DEVICES = ("cuda",)  # where float16 autocast is worth running (and is allowed)
MIN_SCALE = 1.0  # an overflow below this loss scale is a bad step (DeepSpeed's min_loss_scale, too)


def resolve_precision(name: str, device: torch.device, *, fsdp: bool = False) -> str:
    """fp32, bf16 or fp16: what `name` (one of PRECISIONS) means on `device`; UserError where the device
    (or FSDP, for fp16) cannot run it."""
    if name not in PRECISIONS:
        raise UserError(f"train.precision={name!r} is not allowed; choose one of {', '.join(PRECISIONS)}")
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if name == "auto":
        return "bf16" if cuda_bf16 else "fp32"
    if name == "fp16" and device.type not in FP16_DEVICES:
        raise UserError(f"train.precision='fp16' needs a CUDA GPU; this run trains on {device.type}: use bf16 "
                        "(or fp32, or auto)")
    if name == "fp16" and fsdp:
        raise UserError("train.precision='fp16' cannot train with train.distributed='fsdp' (the loss scaler "
                        "would see one shard of the gradients); use bf16 or fp32, or ddp")
    if name == "bf16" and device.type == "cuda" and not cuda_bf16:
        raise UserError(f"train.precision='bf16' but {torch.cuda.get_device_name(device)} has no bfloat16 "
                        "support; use fp16 or fp32 (or auto)")
    return name


class Precision:
    """How one run computes its steps: `autocast()` around the forward pass and the loss, and `scaler`,
    a torch.amp.GradScaler that is enabled under fp16 only (disabled, its calls pass the loss and the
    optimizer step through unchanged)."""

    def __init__(self, name: str, device: torch.device, *, fsdp: bool = False) -> None:
        self.name = resolve_precision(name, device, fsdp=fsdp)
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.name == "fp16")

    def autocast(self) -> AbstractContextManager:
        if self.name == "fp32":
            return nullcontext()
        return torch.autocast(self.device_type, dtype=AUTOCAST_DTYPES[self.name])

    def scale(self) -> float:
        """The loss scale the next step uses (1 without fp16)."""
        return self.scaler.get_scale() if self.scaler.is_enabled() else 1.0

    def retried(self, loss: float, scale_before: float) -> bool:
        """Whether the step just taken, with a finite `loss` at `scale_before`, was skipped by the loss
        scaler for an overflow and will be retried at a smaller scale (not a bad step; see the module
        docstring). The scaler backing off is the test, so a gradient norm that overflows in float32 while
        every gradient is finite is not mistaken for one."""
        return (self.scaler.is_enabled() and math.isfinite(loss) and scale_before >= MIN_SCALE
                and self.scale() < scale_before)


@contextmanager
def tf32_matmuls(device: torch.device) -> Iterator[None]:
    """On a CUDA device, let float32 matmuls and convolutions use TF32 tensor cores (inputs rounded to a
    10-bit mantissa, float32 accumulation and range: several times faster on Ampere and later, and below
    the noise of training); torch's own settings are restored on exit. Elsewhere, nothing changes."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


__all__ = ["FP16_DEVICES", "MIN_SCALE", "PRECISIONS", "Precision", "resolve_precision", "tf32_matmuls"]
