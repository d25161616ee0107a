"""A Mamba-style selective state-space mixer in place of attention (Gu & Dao 2023, "Mamba: Linear-Time
Sequence Modeling with Selective State Spaces", https://arxiv.org/abs/2312.00752).

The recurrence (sec. 2, eq. 1-2 and 4; sec. 3.2, Algorithm 2 "SSM + Selection (S6)"). Every channel c of
the input runs its own linear recurrence over a hidden state of N numbers:
    h_t = exp(dt_t A) * h_{t-1} + dt_t B_t x_t        (B, C, N) state, one row per channel
    y_t = C_t . h_t + D x_t                            (B, C)
A (C, N) is diagonal, real and negative, so the decay exp(dt_t A) lies in (0, 1]: the state forgets.
What makes it *selective* is that the step dt_t (per channel), the input map B_t and the read-out C_t (each N
numbers) are computed from the token x_t itself, so the model chooses per token how much to remember
(dt small: keep the state, ignore x_t) and what to write and read. exp(dt A) is the zero-order-hold
discretisation of A (eq. 4); for B we use the simpler dt_t B_t, as Mamba's reference code does.

The parallel scan (sec. 3.3.2). The update h_t = a_t h_{t-1} + b_t is an affine map, and composing two of them
is again one: first (a1, b1) then (a2, b2) gives (a1 a2, a2 b1 + b2). That combine is associative, so
all prefixes h_1 .. h_T follow from a log-depth scan (Hillis & Steele 1986): in round k = 1, 2, 4, ...
every position combines with the one k steps earlier. We run it on (B, L, C, N) tensors over chunks of
L = `chunk` steps and carry the state from one chunk to the next with a Python loop: memory grows with L,
not T. Every factor is a decay <= 1, so nothing overflows (unlike exp of a cumulative sum of dt A, divided
back out).

The recurrent step: for generation, one token updates h (B, C, N) and the last `conv` - 1 inputs of the
convolution: constant memory, however long the sequence (`SSMState` is the whole cache).

The block (sec. 3.4, Fig. 3): in_proj to x and a gate z of width E = expand * d; x -> causal depthwise
convolution -> SiLU -> selective scan; y * SiLU(z); out_proj back to d. A and D start as in S4D-real
(sec. 3.6): A = -(1, 2, .., N) per channel, D = 1; dt_bias so that softplus(dt_bias) is log-uniform in
[dt_min, dt_max]. A bidirectional mixer (for encoders) adds a second scan over the reversed sequence.

B batch, T length, d model width, C channels of the scan (E = expand * d; the paper's D), N state size,
L chunk length, K convolution width, R rank of the dt projection. B_t, C_t above are written b, c below.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.errors import UserError
from tformer.nn.kernels.base import key_valid


class SSMState:
    """The decoding cache of one causal mixer: the last K - 1 inputs of the convolution and the state h."""

    def __init__(self, *, conv: Tensor, h: Tensor, length: int = 0) -> None:
        self.conv = conv  # (B, C, K-1)
        self.h = h  # (B, C, N)
        self.length = length  # positions consumed so far

    def reorder(self, index: Tensor) -> None:
        self.conv = self.conv.index_select(0, index)
        self.h = self.h.index_select(0, index)


def associative_scan(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Inclusive Hillis-Steele scan along dim 1 of the affine maps h -> a_t h + b_t, (B, L, C, N) each.
    Returns (prod_{s<=t} a_s, the state at t when the state before position 0 is zero)."""
    k = 1
    while k < a.shape[1]:
        b = torch.cat([b[:, :k], a[:, k:] * b[:, :-k] + b[:, k:]], dim=1)  # earlier (a, b) then this one
        a = torch.cat([a[:, :k], a[:, k:] * a[:, :-k]], dim=1)
        k *= 2
    return a, b


def selective_scan(x: Tensor, dt: Tensor, A: Tensor, b: Tensor, c: Tensor, D: Tensor, *, chunk: int,
                   h: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The parallel form. x, dt (B, T, C); A (C, N); b, c (B, T, N); D (C,); h (B, C, N) the state before
    position 0 (None: zeros). Returns y (B, T, C) and the state after the last position (B, C, N)."""
    if h is None:
        h = x.new_zeros(x.shape[0], x.shape[2], A.shape[1])
    ys = [x[:, :0]]
    for start in range(0, x.shape[1], chunk):
        part = slice(start, start + chunk)
        decay = torch.exp(dt[:, part, :, None] * A)  # (B, L, C, N), each in (0, 1]
        write = (dt[:, part] * x[:, part])[..., None] * b[:, part, None, :]  # (B, L, C, N)
        decay, write = associative_scan(decay, write)
        states = decay * h[:, None] + write  # (B, L, C, N): h_t at every position of the chunk
        ys.append(torch.einsum("blcn,bln->blc", states, c[:, part]))  # (B, L, C)
        h = states[:, -1]
    return torch.cat(ys, dim=1) + x * D, h


def selective_step(x: Tensor, dt: Tensor, A: Tensor, b: Tensor, c: Tensor, D: Tensor,
                   h: Tensor) -> tuple[Tensor, Tensor]:
    """The recurrent form, one position. x, dt (B, C); A (C, N); b, c (B, N); D (C,); h (B, C, N).
    Returns y (B, C) and the new state (B, C, N)."""
    h = torch.exp(dt[..., None] * A) * h + (dt * x)[..., None] * b[:, None, :]
    return torch.einsum("bcn,bn->bc", h, c) + x * D, h


class SelectiveSSM(nn.Module):
    """One direction: causal depthwise convolution, SiLU, then the selective scan. dt_bias, A_log and D are
    plain parameters so that a model-wide re-initialisation of nn.Linear leaves their init alone."""

    def __init__(self, *, channels: int, state: int, conv: int, chunk: int, dt_rank: int,
                 dt_min: float = 1e-3, dt_max: float = 1e-1) -> None:
        super().__init__()
        self.state, self.chunk, self.dt_rank = state, chunk, dt_rank
        self.conv1d = nn.Conv1d(channels, channels, conv, groups=channels)  # unpadded; the state gives the past
        self.x_proj = nn.Linear(channels, dt_rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, channels, bias=False)  # default init = Mamba's U(+-R^-1/2)
        dt = torch.exp(torch.empty(channels).uniform_(math.log(dt_min), math.log(dt_max)))  # (C,)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.arange(1.0, state + 1)).repeat(channels, 1))  # (C, N)
        self.D = nn.Parameter(torch.ones(channels))
        self.A_log.no_weight_decay = True  # read by training.optim.param_groups, as in Mamba

    def initial_state(self, *, batch: int, dtype: torch.dtype = torch.float32,
                      device: torch.device | str | None = None) -> SSMState:
        channels, width = self.conv1d.in_channels, self.conv1d.kernel_size[0]
        return SSMState(conv=torch.zeros(batch, channels, width - 1, dtype=dtype, device=device),
                        h=torch.zeros(batch, channels, self.state, dtype=dtype, device=device))

    def _select(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """u (..., C) -> dt (..., C), b (..., N), c (..., N): the input-dependent parameters."""
        dt, b, c = self.x_proj(u).split([self.dt_rank, self.state, self.state], dim=-1)
        return F.softplus(self.dt_proj(dt) + self.dt_bias), b, c

    def forward(self, x: Tensor, *, valid: Tensor | None = None,
                state: SSMState | None = None) -> tuple[Tensor, SSMState]:
        """x (B, T, C); valid (B|1, T) False at padding: its input is zeroed and its dt set to 0, so the
        state passes it unchanged; state before position 0 (None: zeros). Returns y (B, T, C) and the
        state after the last position."""
        if state is None:
            state = self.initial_state(batch=x.shape[0], dtype=x.dtype, device=x.device)
        if valid is not None:
            x = x * valid[..., None]
        window = torch.cat([state.conv, x.transpose(1, 2)], dim=2)  # (B, C, K-1+T)
        u = F.silu(self.conv1d(window)).transpose(1, 2)  # (B, T, C)
        dt, b, c = self._select(u)
        if valid is not None:
            dt = dt * valid[..., None]
        y, h = selective_scan(u, dt, -torch.exp(self.A_log), b, c, self.D, chunk=self.chunk, h=state.h)
        conv = window[:, :, window.shape[2] - state.conv.shape[2] :]  # (B, C, K-1)
        return y, SSMState(conv=conv, h=h, length=state.length + x.shape[1])

    def step(self, x: Tensor, *, valid: Tensor | None = None,
             state: SSMState | None = None) -> tuple[Tensor, SSMState]:
        """One position: x (B, C); valid (B|1,). Returns y (B, C) and the new state; same as `forward`."""
        if state is None:
            state = self.initial_state(batch=x.shape[0], dtype=x.dtype, device=x.device)
        if valid is not None:
            x = x * valid[:, None]
        window = torch.cat([state.conv, x[:, :, None]], dim=2)  # (B, C, K)
        u = F.silu((window * self.conv1d.weight[:, 0]).sum(-1) + self.conv1d.bias)  # (B, C)
        dt, b, c = self._select(u)
        if valid is not None:
            dt = dt * valid[:, None]
        y, h = selective_step(u, dt, -torch.exp(self.A_log), b, c, self.D, state.h)
        return y, SSMState(conv=window[:, :, 1:], h=h, length=state.length + 1)


class SSMMixer(nn.Module):
    """The Mamba block with Attention's call signature, so a layer can hold either."""

    def __init__(self, *, d_model: int, state: int, expand: int, conv: int, chunk: int,
                 bidirectional: bool) -> None:
        super().__init__()
        inner = expand * d_model
        self.bidirectional = bidirectional
        self.in_proj = nn.Linear(d_model, 2 * inner, bias=False)

        def direction() -> SelectiveSSM:
            return SelectiveSSM(channels=inner, state=state, conv=conv, chunk=chunk,
                                dt_rank=math.ceil(d_model / 16))

        self.forward_ssm = direction()
        self.backward_ssm = direction() if bidirectional else None
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def new_cache(self, *, batch: int, max_len: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> SSMState:
        """A zero state; `max_len` is accepted for the KVCache interface and unused (the state is constant)."""
        if self.bidirectional:
            raise UserError("a bidirectional SSM mixer has no cache: it reads the whole sequence at once")
        return self.forward_ssm.initial_state(batch=batch, dtype=dtype, device=device)

    def _check(self, context: Tensor | None, causal: bool, cache: SSMState | None) -> None:
        if context is not None:
            raise ValueError("an SSM mixer cannot do cross-attention; pass context=None")
        if causal == self.bidirectional:
            raise ValueError(f"causal={causal} does not match this mixer (bidirectional={self.bidirectional}); "
                             f"it needs causal={not self.bidirectional}")
        if cache is not None and self.bidirectional:
            raise ValueError("a bidirectional SSM mixer does not support a cache")

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        positions: Tensor | None = None,
        cache: SSMState | None = None,
    ) -> Tensor:
        """x (B, T, d); mask bool (B|1, 1, 1, S) True at real tokens, S = cached + T; `positions` is
        ignored (the scan knows the order); cache is continued and updated in place. Returns (B, T, d)."""
        self._check(context, causal, cache)
        b, t, _ = x.shape
        past = 0 if cache is None else cache.length
        valid = key_valid(mask, b, past + t, kind="ssm")  # (B, S) or None
        valid = None if valid is None else valid[:, past:]  # (B, T): the new positions
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B, T, E) each
        if cache is not None and t == 1:
            y, final = self.forward_ssm.step(u[:, 0], valid=None if valid is None else valid[:, 0], state=cache)
            y = y[:, None]  # (B, 1, E)
        else:
            y, final = self.forward_ssm(u, valid=valid, state=cache)  # (B, T, E)
        if cache is not None:
            cache.conv, cache.h, cache.length = final.conv, final.h, final.length
        if self.backward_ssm is not None:
            back, _ = self.backward_ssm(u.flip(1), valid=None if valid is None else valid.flip(1))
            y = y + back.flip(1)
        return self.out_proj(y * F.silu(z))  # (B, T, d)


__all__ = ["SSMMixer", "SSMState", "SelectiveSSM", "associative_scan", "selective_scan", "selective_step"]
