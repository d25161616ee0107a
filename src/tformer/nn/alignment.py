"""Attention for RNN decoders: a decoder state z looks at every encoder state h_s through a MATCH function,
and reads their weighted sum (Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473; Luong et al. 2015,
https://arxiv.org/abs/1508.04025):

    e_s = MATCH(z, h_s)          alpha = softmax_s(e)  (padding left out)          c = sum_s alpha_s h_s

The MATCH functions:
    dot        z . h_s                                    Luong's dot
    general    z . W h_s                                  Luong's general
    additive   v . tanh(W z + U h_s)                      Bahdanau's, Luong's concat
    cosine     beta cos(z, h_s), beta learned             content addressing (Graves et al. 2014): a bare
                                                          cosine in [-1, 1] cannot make a peaked softmax
Each splits into `keys(h)`, what depends on the source alone (W h, U h, h / |h|), computed once per sentence,
and `forward(z, keys)`, the scores of each decoder step. One head, and no scaling by sqrt(d): the
Transformer's scaled dot product (Vaswani et al. 2017) is `Attention`'s, in attention.py.

B batch, T decoder steps, S source length, d width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.nn.kv_cache import readers_per_source


class DotMatch(nn.Module):
    def keys(self, h: Tensor) -> Tensor:  # (B, S, d) -> (B, S, d)
        return h

    def forward(self, z: Tensor, keys: Tensor) -> Tensor:  # (B, T, d), (B, S, d) -> (B, T, S)
        return z @ keys.transpose(1, 2)


class GeneralMatch(nn.Module):
    def __init__(self, *, d_model: int) -> None:
        super().__init__()
        self.w = nn.Linear(d_model, d_model, bias=False)

    def keys(self, h: Tensor) -> Tensor:  # W h_s, (B, S, d)
        return self.w(h)

    def forward(self, z: Tensor, keys: Tensor) -> Tensor:  # z . (W h_s), (B, T, S)
        return z @ keys.transpose(1, 2)


class AdditiveMatch(nn.Module):
    def __init__(self, *, d_model: int) -> None:
        super().__init__()
        self.w_z = nn.Linear(d_model, d_model, bias=False)  # W
        self.w_h = nn.Linear(d_model, d_model, bias=False)  # U
        self.v = nn.Linear(d_model, 1, bias=False)

    def keys(self, h: Tensor) -> Tensor:  # U h_s, (B, S, d)
        return self.w_h(h)

    def forward(self, z: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(self.w_z(z)[:, :, None] + keys[:, None])  # (B, T, S, d)
        return self.v(hidden)[..., 0]  # (B, T, S)


class CosineMatch(nn.Module):
    def __init__(self, *, sharpness: float) -> None:
        super().__init__()
        self.sharpness = nn.Parameter(torch.tensor(float(sharpness)))  # beta

    def keys(self, h: Tensor) -> Tensor:  # h_s / |h_s|, (B, S, d)
        return F.normalize(h, dim=-1)

    def forward(self, z: Tensor, keys: Tensor) -> Tensor:  # (B, T, S)
        return self.sharpness * (F.normalize(z, dim=-1) @ keys.transpose(1, 2))


class Alignment(nn.Module):
    """Scores by a MATCH module, softmax over the real source positions, and the weighted sum of the values.

    `record_weights`: keep the attention weights in `weights` (B, 1, T, S), one head, for plots; a decoder
    that attends one step at a time calls this once a step, and each call's weights are appended along the
    query axis, so after a whole target the map holds every step in order (whoever sets the flag clears
    `weights`)."""

    def __init__(self, *, match: nn.Module, d_model: int) -> None:
        super().__init__()
        self.match = match
        self.d_model = d_model  # what the FLOP count reads (models/calc.py)
        self.record_weights = False
        self.weights: Tensor | None = None

    def keys(self, h: Tensor) -> Tensor:
        """The keys of the encoder states h (B, S, d): what MATCH computes from the source alone."""
        return self.match.keys(h)

    def forward(self, z: Tensor, keys: Tensor, values: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
        """z (B, T, d) decoder states; keys (B, S, d) from `keys`; values (B, S, d) the encoder states;
        valid (B, S) True at real source tokens. Returns the context c (B, T, d) and alpha (B, T, S). Keys,
        values and valid may have B / g rows, each read by g consecutive rows of z (beam search's beams): each
        source's rows then attend as one row's g * T steps."""
        b, t, d = z.shape
        rows = keys.shape[0]
        readers_per_source(b, rows, what="decoder states")
        z = z.reshape(rows, -1, d)  # (B / g, g * T, d)
        scores = self.match(z, keys).masked_fill(~valid[:, None, :], float("-inf"))  # (B / g, g * T, S)
        alpha = torch.softmax(scores.float(), dim=-1).to(values.dtype)
        context, alpha = (alpha @ values).reshape(b, t, d), alpha.reshape(b, t, -1)  # (B, T, d), (B, T, S)
        if self.record_weights:
            step = alpha.detach()[:, None]  # (B, 1, T, S)
            self.weights = step if self.weights is None else torch.cat([self.weights, step], dim=2)
        return context, alpha


__all__ = ["AdditiveMatch", "Alignment", "CosineMatch", "DotMatch", "GeneralMatch"]
