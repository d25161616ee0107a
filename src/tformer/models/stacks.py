"""The piece every family shares: a stack of layers (built by `builders.build_stack`), and the positions
its tokens get (`positions_for`).

B batch, T length, d width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tformer.errors import UserError
from tformer.nn.kv_cache import LayerCache, StaticKV
from tformer.nn.layers import DecoderLayer


class Stack(nn.Module):
    """L layers and, for pre-LN, a final norm (nn.Identity when there is none)."""

    def __init__(self, *, layers: list[nn.Module], final_norm: nn.Module, max_len: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.max_len = max_len

    def forward(self, x: Tensor, *args: Tensor, caches: list[LayerCache] | None = None, **kw: object) -> Tensor:
        if x.shape[1] > self.max_len:
            raise UserError(f"sequence length {x.shape[1]} is longer than the context max_len={self.max_len}")
        for i, layer in enumerate(self.layers):
            x = layer(x, *args, cache=None if caches is None else caches[i], **kw)
        return self.final_norm(x)

    def new_caches(self, *, batch: int, max_len: int, dtype: torch.dtype = torch.float32,
                   device: torch.device | str | None = None) -> list[LayerCache]:
        """One cache per layer, of the kind its mixer keeps (a preallocated KV cache, a recurrent state);
        cross-attention layers also get a slot for the encoder K/V."""
        caches = []
        for layer in self.layers:
            state = layer.mixer.new_cache(batch=batch, max_len=max_len, dtype=dtype, device=device)
            caches.append(LayerCache(state, StaticKV() if isinstance(layer, DecoderLayer) else None))
        return caches


def positions_for(ids: Tensor, offset: int = 0, *, valid: Tensor | None = None) -> Tensor:
    """(B|1, T) positions of the T newest tokens. Without `valid`: offset..offset+T-1, one row (1, T) that
    broadcasts over the batch, so a position table is read (and its gradient summed) T times rather than
    B T times. With `valid` (B, S), True at the real tokens among all S = offset + T so far: each token's
    count of real tokens before it, so every row counts from its own first real token and a real token gets
    the same position however the batch is padded (left, as ragged generation pads, or right)."""
    if valid is None:
        return torch.arange(offset, offset + ids.shape[1], device=ids.device)[None]  # (1, T)
    if valid.shape[-1] < ids.shape[1]:
        raise ValueError(f"valid covers {valid.shape[-1]} positions but there are {ids.shape[1]} new tokens; "
                         "it must cover every token so far (cached and new)")
    counted = (valid.long().cumsum(-1) - 1).clamp(min=0)  # (B, S); padding before the first real token: 0
    return counted[:, valid.shape[1] - ids.shape[1]:]  # (B, T): the newest T
