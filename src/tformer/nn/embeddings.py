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
        vocab = self.tokens.num_embeddings
        # data-dependent checks read the ids on the host: they would split a compiled graph and cannot run
        # inside a captured CUDA graph (whose ids are the model's own, from a step checked eagerly before)
        checked = not torch.compiler.is_compiling() and not (ids.is_cuda and torch.cuda.is_current_stream_capturing())
        if checked and ids.numel() and (int(ids.max()) >= vocab or int(ids.min()) < 0):
            bad = int(ids.max()) if int(ids.max()) >= vocab else int(ids.min())
            raise UserError(f"token id {bad} is out of range; the vocabulary has ids 0..{vocab - 1}")
        x = self.tokens(ids)  # (B, T, d)
        if self.scale != 1.0:  # GPT and BERT do not scale: no multiply by one, forward or backward
            x = x * self.scale
        if self.positions is not None:
            if checked and int(positions.max()) >= self.positions.max_len:
                raise UserError(f"position {int(positions.max())} is beyond the position table "
                                 f"(max_len={self.positions.max_len})")
            x = x + self.positions(positions)
        if self.segments is not None:
            x = x + self.segments(torch.zeros_like(ids) if segments is None else segments)
        return self.dropout(self.norm(x))
