"""The input of every stack: token embeddings, scaled (the paper multiplies them by sqrt(d), sec. 3.4), plus
absolute positions and, for BERT, segments; then an optional norm and dropout.

B batch, T length, d width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tformer.errors import UserError


class Embeddings(nn.Module):
    """tokens * scale + positions (+ segments), then an optional norm, then dropout."""

    def __init__(self, *, tokens: nn.Embedding, positions: nn.Module | None, scale: float,
                 dropout: float, segments: nn.Embedding | None = None, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.tokens, self.positions, self.segments = tokens, positions, segments
        self.scale = scale
        self.norm = norm if norm is not None else nn.Identity()
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, positions: Tensor, segments: Tensor | None = None) -> Tensor:
        """ids, segments (B, T), positions (B|1, T) -> (B, T, d)."""
        if self._checks(ids) and ids.numel():
            self._check_ranges(ids, positions)
        x = self.tokens(ids)  # (B, T, d)
        if self.scale != 1.0:  # GPT and BERT do not scale: no multiply by one, forward or backward
            x = x * self.scale
        if self.positions is not None:
            x = x + self.positions(positions)
        if self.segments is not None:
            x = x + self.segments(torch.zeros_like(ids) if segments is None else segments)
        return self.dropout(self.norm(x))

    def _checks(self, ids: Tensor) -> bool:
        """Whether this call checks its ids and positions, which reads them on the host. On the CPU that is
        free. On a GPU it is a sync: the host stops launching work until the device has run everything queued
        (for a decoder, its whole encoder), so a training step checks nothing there (its batches come from
        the task's tokenizer, in range by construction) and evaluation and decoding do. Never inside a
        compiled graph (it would split it) or a captured CUDA graph (whose ids are the model's own, from a
        step checked eagerly before)."""
        if torch.compiler.is_compiling():
            return False
        if ids.is_cpu:
            return True
        return not self.training and not (ids.is_cuda and torch.cuda.is_current_stream_capturing())

    def _check_ranges(self, ids: Tensor, positions: Tensor) -> None:
        """A clear error for an id outside the vocabulary or a position beyond the table (on a GPU, the
        lookup would fail with a device-side assert that ends the process's use of the device): the
        extremes read in one transfer."""
        vocab, table = self.tokens.num_embeddings, self.positions
        if ids.is_cpu:
            low, high, top = int(ids.min()), int(ids.max()), None if table is None else int(positions.max())
        else:  # one transfer, not one a value: each waits for the device
            extremes = [ids.min(), ids.max()] + ([] if table is None else [positions.max()])
            low, high, *rest = torch.stack(extremes).tolist()
            top = rest[0] if rest else None
        if high >= vocab or low < 0:
            raise UserError(f"token id {high if high >= vocab else low} is out of range; the vocabulary has ids "
                             f"0..{vocab - 1}")
        if top is not None and top >= table.max_len:
            raise UserError(f"position {top} is beyond the position table (max_len={table.max_len})")
