"""Padding token lists into one tensor: the one padder every batch goes through (translation sources and
targets, BERT sentence pairs, classifier texts, generation prompts, scored sequences), and the mask of
which positions are real tokens.

Right padding puts each row's tokens first (encoders, teacher forcing, scoring); left padding puts them
last, so that every row's newest token sits in the last column (batched generation, `decoding.generate`).

B rows, L the longest row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tformer.errors import UserError

SIDES = ("right", "left")


def pad(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right", *,
        device: torch.device | str | None = None) -> Tensor:
    """Token lists -> ids (B, L), `pad_id` after each row's tokens (side="right") or before them
    (side="left"); L is the longest row's length. Built on the CPU, then moved to `device` in one copy."""
    if side not in SIDES:
        raise UserError(f"side={side!r} is not allowed; choose right or left")
    width = max((len(row) for row in rows), default=0)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, L)
    for i, row in enumerate(rows):
        start = 0 if side == "right" else width - len(row)
        out[i, start : start + len(row)] = torch.as_tensor(list(row), dtype=torch.long)
    return out if device is None else out.to(device)


def valid_mask(lengths: Sequence[int], *, width: int, side: str = "right",
               device: torch.device | str | None = None) -> Tensor:
    """(B, L) True at the real tokens of rows of these `lengths` padded to `width` on `side` (as `pad`)."""
    if side not in SIDES:
        raise UserError(f"side={side!r} is not allowed; choose right or left")
    column = torch.arange(width, device=device)[None, :]  # (1, L)
    length = torch.as_tensor(list(lengths), dtype=torch.long, device=device)[:, None]  # (B, 1)
    return column < length if side == "right" else column >= width - length


__all__ = ["pad", "valid_mask"]
