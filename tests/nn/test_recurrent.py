"""nn/recurrent.py: the encoder against torch's own LSTM / GRU run on each sentence alone (no padding, no
packing), the decoder's step with input feeding against the Luong et al. equations written out, and the
state reordered along the batch as beam search does."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tformer.nn.alignment import Alignment, DotMatch
from tformer.nn.recurrent import RecurrentDecoder, RecurrentEncoder, RecurrentState

E, D, L = 5, 8, 2
LENGTHS = [6, 3, 1]  # right-padded to 6


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_equals_torch_run_on_each_sentence_alone(cell: type[nn.RNNBase], bidirectional: bool) -> None:
    torch.manual_seed(0)
    directions = 2 if bidirectional else 1
    rnn = cell(E, D // directions, num_layers=L, batch_first=True, bidirectional=bidirectional)
    encoder = RecurrentEncoder(rnn=rnn)
    x = torch.randn(len(LENGTHS), max(LENGTHS), E)
    valid = torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]  # (B, S)
    states, h, c = encoder(x, valid)
    assert states.shape == (3, 6, D) and h.shape == (L, 3, D) and (c is None) == (cell is nn.GRU)
    for b, n in enumerate(LENGTHS):
        alone, hidden = rnn(x[b : b + 1, :n])  # torch's RNN over the real tokens only
        final_h = hidden if cell is nn.GRU else hidden[0]  # (L * directions, 1, D / directions)
        assert torch.allclose(states[b, :n], alone[0], atol=1e-6)
        assert states[b, n:].abs().sum() == 0  # padding: no state
        for layer in range(L):  # each layer's final state: [forward ; backward]
            expected = torch.cat([final_h[layer * directions + k, 0] for k in range(directions)])
            assert torch.allclose(h[layer, b], expected, atol=1e-6)
            if cell is nn.LSTM:
                expected_c = torch.cat([hidden[1][layer * directions + k, 0] for k in range(directions)])
                assert torch.allclose(c[layer, b], expected_c, atol=1e-6)


def test_encoder_refuses_left_padding() -> None:
    encoder = RecurrentEncoder(rnn=nn.GRU(E, D, batch_first=True))
    valid = torch.tensor([[False, True, True]])
    with pytest.raises(ValueError, match="right-padded sources"):
        encoder(torch.randn(1, 3, E), valid)


def test_decoder_step_is_luong_input_feeding() -> None:
    """z_t = LSTM([y_t ; o_t-1]); c_t = sum alpha h; o_t = tanh(W_c [c_t ; z_t]), written out with an
    LSTMCell holding the same weights."""
    torch.manual_seed(0)
    rnn = nn.LSTM(E + D, D, batch_first=True)
    combine = nn.Linear(2 * D, D, bias=False)
    decoder = RecurrentDecoder(rnn=rnn, alignment=Alignment(match=DotMatch(), d_model=D), combine=combine)
    cell = nn.LSTMCell(E + D, D)
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in rnn.state_dict().items()})
    y, memory = torch.randn(2, 4, E), torch.randn(2, 5, D)
    valid = torch.ones(2, 5, dtype=torch.bool)
    h0, c0 = torch.randn(1, 2, D), torch.randn(1, 2, D)
    state = RecurrentState()
    state.start(h0, c0, torch.zeros(2, D))
    with torch.no_grad():
        out = decoder(y, state, keys=memory, values=memory, valid=valid)
        h, c, o = h0[0], c0[0], torch.zeros(2, D)
        for t in range(4):
            h, c = cell(torch.cat([y[:, t], o], dim=-1), (h, c))
            alpha = torch.softmax(torch.einsum("bd,bsd->bs", h, memory), dim=-1)
            o = torch.tanh(combine(torch.cat([torch.einsum("bs,bsd->bd", alpha, memory), h], dim=-1)))
            assert torch.allclose(out[:, t], o, atol=1e-6)
    assert state.length == 4 and torch.allclose(state.h[0], h, atol=1e-6) and torch.allclose(state.feed, o)


def test_decoder_without_input_feeding_attends_after_the_rnn() -> None:
    """z_t = LSTM(y_t); c_t = sum alpha h; o_t = tanh(W_c [c_t ; z_t]), written out step by step with an
    LSTMCell holding the same weights: what the decoder computes for all steps at once."""
    torch.manual_seed(0)
    rnn = nn.LSTM(E, D, batch_first=True)
    combine = nn.Linear(2 * D, D, bias=False)
    decoder = RecurrentDecoder(rnn=rnn, alignment=Alignment(match=DotMatch(), d_model=D), combine=combine,
                               input_feeding=False)
    cell = nn.LSTMCell(E, D)
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in rnn.state_dict().items()})
    y, memory = torch.randn(2, 4, E), torch.randn(2, 5, D)
    valid = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    h0, c0 = torch.randn(1, 2, D), torch.randn(1, 2, D)
    state = RecurrentState()
    state.start(h0, c0, None)
    with torch.no_grad():
        out = decoder(y, state, keys=memory, values=memory, valid=valid)
        h, c = h0[0], c0[0]
        for t in range(4):
            h, c = cell(y[:, t], (h, c))
            scores = torch.einsum("bd,bsd->bs", h, memory).masked_fill(~valid, float("-inf"))
            context = torch.einsum("bs,bsd->bd", torch.softmax(scores, dim=-1), memory)
            assert torch.allclose(out[:, t], torch.tanh(combine(torch.cat([context, h], dim=-1))), atol=1e-6)
    assert state.length == 4 and state.feed is None and torch.allclose(state.h[0], h, atol=1e-6)


def test_state_reorders_along_the_batch() -> None:
    state = RecurrentState()
    state.reorder(torch.tensor([0, 0]))  # empty: nothing to move
    h, c, feed = torch.randn(L, 3, D), torch.randn(L, 3, D), torch.randn(3, D)
    state.start(h, c, feed)
    index = torch.tensor([2, 2, 0])
    state.reorder(index)
    assert torch.equal(state.h, h[:, index]) and torch.equal(state.c, c[:, index])
    assert torch.equal(state.feed, feed[index])
    assert RecurrentState().length == 0
    with pytest.raises(ValueError, match="give both alignment and combine"):
        RecurrentDecoder(rnn=nn.GRU(E, D, batch_first=True), combine=nn.Linear(2 * D, D))
