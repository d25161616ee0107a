"""Key/value caches and the other per-layer state of incremental decoding.

`MixerState`: what decoding needs from the state of a layer's mixer, whatever the mixer is. `KVCache`:
self-attention keys and values, preallocated to the longest length and filled step by step (prefill writes
the prompt, each decode step one position). `FixedKVCache`: the same buffers seen with fixed shapes, for a
decode step captured once and replayed (`tformer.decoding.captured`). `StaticKV`: cross-attention keys and
values, computed once from the encoder output and reused at every step. `LayerCache`: one layer's mixer
state and cross-attention keys/values. All reorder along the batch for beam search.

B batch, Hk key/value heads, S cached length, S_max preallocated length, D head width.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor


class MixerState(Protocol):
    """A mixer's decoding state: a `KVCache` for softmax attention, a `LinearState` for linear attention,
    an `SSMState` for the state-space mixer. The mixer grows it; decoding reads how far and reorders it."""

    length: int  # positions consumed so far

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows `index` (B',)."""
        ...


class KVCache:
    def __init__(self, *, batch: int, n_kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (B, Hk, S_max, D)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0
        self._spare: tuple[Tensor, Tensor] | None = None  # the buffers `reorder` writes into

    @classmethod
    def sharing(cls, k: Tensor, v: Tensor) -> KVCache:
        """An empty cache that writes into the given (B, Hk, S_max, D) buffers rather than its own: a prompt
        prefilled through it is where a `FixedKVCache` over the same buffers reads it at the following steps."""
        batch, heads, max_len, dim = k.shape
        cache = cls(batch=0, n_kv_heads=heads, max_len=max_len, head_dim=dim, dtype=k.dtype, device=k.device)
        cache.k, cache.v = k, v
        return cache

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, Hk, T, D) and return everything cached so far, (B, Hk, S, D)."""
        end = self.length + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"KV cache overflow: {end} positions > max_len={self.k.shape[2]}")
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (speculative decoding's roll-back past a rejected token):
        the next `update` writes there. Nothing is copied."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a KV cache of {self.length} positions to {length}")
        self.length = length

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows `index` (B',): only the filled positions are copied, into a second pair of
        buffers that then become the cache (beam search reorders at every step; copying the whole
        preallocated length would move max_len / length times the bytes). On a CPU, when as many rows stay
        and at most a third of them take another row's keys (beam search places each hypothesis where its
        parent was when it can: `beam._stay`), only those rows are copied, in place."""
        rows, n = index.numel(), self.length
        if rows == self.k.shape[0] and index.device.type == "cpu":  # on a GPU, counting them would wait for it
            moved = (index != torch.arange(rows)).nonzero().flatten()  # (M,) rows that take another's keys
            if 3 * moved.numel() <= rows:
                source = index[moved]  # (M,)
                for cache in (self.k, self.v):
                    filled = cache[:, :, :n]
                    filled.index_copy_(0, moved, filled.index_select(0, source))  # read before written
                return
        if self._spare is None or self._spare[0].shape[0] != rows:
            shape = (rows, *self.k.shape[1:])
            self._spare = (self.k.new_empty(shape), self.v.new_empty(shape))  # positions >= length: never read
        k, v = self._spare
        torch.index_select(self.k[:, :, :n], 0, index, out=k[:, :, :n])
        torch.index_select(self.v[:, :, :n], 0, index, out=v[:, :, :n])
        old = (self.k, self.v)
        self.k, self.v = k, v
        self._spare = old if old[0].shape[0] == rows else None


class FixedKVCache:
    """Keys and values in preallocated (B, Hk, S_max, D) buffers, with fixed shapes at every step so that a
    decode step can be captured once (a CUDA graph) and replayed: the new position is a device tensor
    `position` (1,), shared with the decoder that advances it, not a Python int; each step writes one
    position there and attention reads all S_max of them, the caller's key-padding mask hiding the ones not
    written yet (and left padding). Nothing depends on how far decoding has gone, so nothing needs the host.

    `length` is what attention counts before the new key: every other slot (S_max - 1), which makes the
    S_max keys the mask is checked against. ALiBi, which biases by the query's index, does not fit this view
    (the captured decoders refuse it)."""

    def __init__(self, k: Tensor, v: Tensor, position: Tensor) -> None:
        self.k, self.v = k, v  # (B, Hk, S_max, D)
        self.position = position  # (1,) long: where the next key goes

    @property
    def length(self) -> int:
        return self.k.shape[2] - 1

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write (B, Hk, 1, D) at `position` and return the whole buffers (B, Hk, S_max, D)."""
        if k.shape[2] != 1:
            raise ValueError(f"a fixed KV cache takes one new position a step, got {k.shape[2]}; prefill the "
                             "prompt through KVCache.sharing(k, v)")
        self.k.index_copy_(2, self.position, k)
        self.v.index_copy_(2, self.position, v)
        return self.k, self.v

    def reorder(self, index: Tensor) -> None:
        """Keep the rows `index` (B,), in place: the buffers keep their addresses, which a captured step
        reads. All S_max positions move (the filled length is not known on the host)."""
        if index.numel() != self.k.shape[0]:
            raise ValueError(f"a fixed KV cache keeps its {self.k.shape[0]} rows; got {index.numel()} to keep")
        self.k.copy_(self.k.index_select(0, index))
        self.v.copy_(self.v.index_select(0, index))


def readers_per_source(readers: int, sources: int, *, what: str) -> int:
    """How many consecutive rows (`what`, `readers` of them) read each of `sources` rows of cross-attention
    keys: 1 when as many, g when beam search keeps each source once for its g beams; a ValueError unless
    `sources` divides `readers`."""
    if sources == 0 or readers % sources:
        raise ValueError(f"{readers} rows of {what} cannot share keys of {sources} rows; give as many, or a divisor")
    return readers // sources


class StaticKV:
    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def reorder(self, index: Tensor) -> None:
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


class LayerCache:
    """What one layer keeps between decoding steps."""

    def __init__(self, mixer_state: MixerState, cross_kv: StaticKV | None = None) -> None:
        """mixer_state: the state of the layer's mixer (a KVCache for softmax attention, or a recurrent
        state for linear attention and SSM mixers); cross_kv: the cross-attention keys/values of a decoder
        layer (None in a layer without cross-attention)."""
        self.mixer_state = mixer_state
        self.cross_kv = cross_kv

    def reorder(self, index: Tensor, *, cross: bool = True) -> None:
        """Keep the batch rows `index`; `cross=False` leaves the cross-attention keys/values alone (when
        every new row reads the same source as the old row in its place)."""
        self.mixer_state.reorder(index)
        if cross and self.cross_kv is not None:
            self.cross_kv.reorder(index)
