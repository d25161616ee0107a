"""The recurrent parts of an RNN encoder-decoder (Sutskever et al. 2014, https://arxiv.org/abs/1409.3215):
an encoder RNN over the source, a decoder RNN over the target started from the encoder's final state, and
the decoder's state between decoding steps.

    encoder    h_1..h_S, final = RNN(x_1..x_S)              bidirectional: [forward ; backward] at each s
    decoder    z_t, state = RNN(y_t, state)                 state_0 = the encoder's final state
      with attention and input feeding (Luong et al. 2015, https://arxiv.org/abs/1508.04025, sec. 3.3):
               z_t, state = RNN([y_t ; o_t-1], state)       o_0 = 0
               c_t = sum_s alpha_ts h_s                     `alignment.Alignment`
               o_t = tanh(W_c [c_t ; z_t])                  predicts y_t+1 and is fed to the next step
      with attention, without input feeding (Luong et al. 2015, sec. 3.1): z_t, state = RNN(y_t, state), the
      same c_t and o_t; nothing flows from o_t back into the RNN, so under teacher forcing the RNN runs over
      the whole target in one call and the attention of every step is one batched product

The cells are torch's own (nn.LSTM, nn.GRU), given by the builder; these modules know no config.

B batch, S source length, T target steps, L layers, d width, e embedding width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

Hidden = Tensor | tuple[Tensor, Tensor]  # what torch's RNNs carry: h (L, B, d), or (h, c) for an LSTM


class RecurrentState:
    """A decoder's state between steps, the recurrent counterpart of a `KVCache`: the hidden state h
    (L, B, d), an LSTM's cell c (L, B, d) (None for a GRU), the input-feeding vector o (B, d) (None without
    attention), and how many target positions it has consumed. Empty until the decoder starts it."""

    def __init__(self) -> None:
        self.h: Tensor | None = None
        self.c: Tensor | None = None
        self.feed: Tensor | None = None
        self.length = 0

    def start(self, h: Tensor, c: Tensor | None, feed: Tensor | None) -> None:
        self.h, self.c, self.feed, self.length = h.contiguous(), None if c is None else c.contiguous(), feed, 0

    @property
    def hidden(self) -> Hidden:
        if self.h is None:
            raise ValueError("the decoder state is empty: start it from the encoder's final state first")
        return self.h if self.c is None else (self.h, self.c)

    def advance(self, hidden: Hidden, feed: Tensor | None, steps: int) -> None:
        self.h, self.c = (hidden, None) if isinstance(hidden, Tensor) else hidden
        self.feed, self.length = feed, self.length + steps

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows `index` (B',)."""
        if self.h is None:
            return
        self.h = self.h.index_select(1, index)
        self.c = None if self.c is None else self.c.index_select(1, index)
        self.feed = None if self.feed is None else self.feed.index_select(0, index)


class RecurrentEncoder(nn.Module):
    """`rnn` (batch_first; bidirectional or not) over a right-padded source, the padding skipped by packing,
    so that each row's final state is that of its last real token (and, backward, of its first). A
    bidirectional RNN's two directions are concatenated, at every position and in every layer's final state."""

    def __init__(self, *, rnn: nn.RNNBase) -> None:
        super().__init__()
        if not rnn.batch_first:
            raise ValueError("the encoder's RNN must be batch_first")
        self.rnn = rnn

    def forward(self, x: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """x (B, S, e) embedded source; valid (B, S) True at real tokens, which come first in each row.
        Returns the states (B, S, d), zero at padding, and the final h and (LSTM) c, each (L, B, d)."""
        lengths = valid.sum(dim=1)  # (B,)
        positions = torch.arange(valid.shape[1], device=valid.device)
        if not torch.equal(valid, positions[None, :] < lengths[:, None]):
            raise ValueError("an RNN encoder reads right-padded sources: real tokens first, then padding")
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, hidden = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # (B, S, d)
        h, c = (hidden, None) if isinstance(hidden, Tensor) else hidden  # (L * D, B, d / D), D directions
        return states, self._layers(h), None if c is None else self._layers(c)

    def _layers(self, final: Tensor) -> Tensor:  # (L * D, B, d / D) -> (L, B, d): [forward ; backward]
        directions = 2 if self.rnn.bidirectional else 1
        final = final.view(self.rnn.num_layers, directions, *final.shape[1:])  # (L, D, B, d / D)
        return torch.cat(final.unbind(1), dim=-1)


class RecurrentDecoder(nn.Module):
    """`rnn` (unidirectional, batch_first) over the embedded target. Without `alignment` the whole target
    runs in one call and its states are the output; with it, `combine` being W_c (2d -> d), either step by
    step with input feeding or, with `input_feeding` False, the RNN in one call and then the attention of
    all steps at once (the module docstring). `dropout` applies to the output (and so to what is fed)."""

    def __init__(self, *, rnn: nn.RNNBase, alignment: nn.Module | None = None, combine: nn.Module | None = None,
                 input_feeding: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if (alignment is None) != (combine is None):
            raise ValueError("give both alignment and combine (attention) or neither")
        self.rnn, self.alignment, self.combine = rnn, alignment, combine
        self.input_feeding = input_feeding and alignment is not None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, state: RecurrentState, *, keys: Tensor | None = None, values: Tensor | None = None,
                valid: Tensor | None = None) -> Tensor:
        """x (B, T, e) embedded decoder inputs; `state` started (or carried from the step before) and advanced
        here by T steps; keys, values (B, S, d) and valid (B, S) for attention. Returns (B, T, d)."""
        if not self.input_feeding:
            z, hidden = self.rnn(x, state.hidden)  # (B, T, d)
            state.advance(hidden, None, x.shape[1])
            return self.dropout(z) if self.alignment is None else self._attend(z, keys, values, valid)
        hidden, feed, outputs = state.hidden, state.feed, []
        for t in range(x.shape[1]):
            z, hidden = self.rnn(torch.cat([x[:, t : t + 1], feed[:, None]], dim=-1), hidden)  # (B, 1, d)
            out = self._attend(z, keys, values, valid)  # (B, 1, d)
            feed = out[:, 0]  # (B, d)
            outputs.append(out)
        state.advance(hidden, feed, x.shape[1])
        return torch.cat(outputs, dim=1)  # (B, T, d)

    def _attend(self, z: Tensor, keys: Tensor, values: Tensor, valid: Tensor) -> Tensor:
        """o = tanh(W_c [c ; z]) for decoder states z (B, T, d) -> (B, T, d), after dropout."""
        context, _ = self.alignment(z, keys, values, valid)  # (B, T, d)
        return self.dropout(torch.tanh(self.combine(torch.cat([context, z], dim=-1))))


__all__ = ["Hidden", "RecurrentDecoder", "RecurrentEncoder", "RecurrentState"]
