"""The selective state-space mixer: the chunked parallel scan against the step-by-step recurrence, cached
decoding against the full forward, padding, direction, gradients and bad calls."""

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tformer.nn.ssm import SSMMixer, SSMState, selective_scan, selective_step

D_MODEL, N, CONV = 16, 4, 4


def make(*, bidirectional: bool = False, chunk: int = 4, dtype: torch.dtype = torch.float32) -> SSMMixer:
    mixer = SSMMixer(d_model=D_MODEL, state=N, expand=2, conv=CONV, chunk=chunk, bidirectional=bidirectional)
    return mixer.to(dtype).eval()


def scan_inputs(b: int, t: int, c: int, n: int, dtype: torch.dtype) -> dict[str, Tensor]:
    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, dtype=dtype)

    return dict(x=rand(b, t, c), dt=F.softplus(rand(b, t, c) - 1.0), A=-torch.exp(rand(c, n)),
                b=rand(b, t, n), c=rand(b, t, n), D=rand(c))


def recurrence(*, x: Tensor, dt: Tensor, A: Tensor, b: Tensor, c: Tensor, D: Tensor,
               h: Tensor) -> tuple[Tensor, Tensor]:
    """The reference: h_t = exp(dt_t A) h_{t-1} + dt_t b_t x_t, one position at a time."""
    ys = []
    for t in range(x.shape[1]):
        y, h = selective_step(x[:, t], dt[:, t], A, b[:, t], c[:, t], D, h)
        ys.append(y)
    return torch.stack(ys, dim=1), h


def test_init_is_s4d_real_and_mamba_dt() -> None:
    ssm = make().forward_ssm
    assert torch.allclose(-torch.exp(ssm.A_log), -torch.arange(1.0, N + 1).expand(2 * D_MODEL, N))
    assert torch.equal(ssm.D, torch.ones(2 * D_MODEL))
    dt = F.softplus(ssm.dt_bias)
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5)


def test_state_dict_keys() -> None:
    keys = set(make(bidirectional=True).state_dict())
    per_direction = {"conv1d.weight", "conv1d.bias", "x_proj.weight", "dt_proj.weight", "dt_bias", "A_log", "D"}
    expected = {"in_proj.weight", "out_proj.weight"}
    expected |= {f"{d}_ssm.{k}" for d in ("forward", "backward") for k in per_direction}
    assert keys == expected


@pytest.mark.parametrize("chunk", [1, 3, 4, 8, 64])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_parallel_scan_equals_recurrence(chunk: int, dtype: torch.dtype, tol: float) -> None:
    b, t, c, n = 2, 13, 6, 5  # 13 is no multiple of 3, 4 or 8; 64 > 13
    inputs = scan_inputs(b, t, c, n, dtype)
    h0 = torch.randn(b, c, n, dtype=dtype)
    for h in (None, h0):
        start = torch.zeros(b, c, n, dtype=dtype) if h is None else h
        y_ref, h_ref = recurrence(**inputs, h=start)
        y, h_last = selective_scan(**inputs, chunk=chunk, h=h)
        assert (y - y_ref).abs().max() <= tol
        assert (h_last - h_ref).abs().max() <= tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("chunk", [3, 16])
def test_prefill_then_decode_equals_full_forward(chunk: int, dtype: torch.dtype, tol: float) -> None:
    mixer = make(chunk=chunk, dtype=dtype)
    x = torch.randn(3, 11, D_MODEL, dtype=dtype)
    full = mixer(x, causal=True)
    cache = mixer.new_cache(batch=3, max_len=11, dtype=dtype)
    parts = [mixer(x[:, :5], causal=True, cache=cache)]  # prefill: parallel form from a zero state
    parts.append(mixer(x[:, 5:8], causal=True, cache=cache))  # more than one token: parallel form, continued
    for i in range(8, 11):
        parts.append(mixer(x[:, i : i + 1], causal=True, cache=cache))  # one token: the recurrent step
    assert cache.length == 11
    assert (torch.cat(parts, dim=1) - full).abs().max() <= tol


def test_left_padding_causal_with_decoding() -> None:
    mixer = make()
    lengths, pad, steps = [6, 3], 4, 3
    rows = [torch.randn(1, n + steps, D_MODEL) for n in lengths]
    width = max(lengths) + pad
    x = torch.randn(2, width + steps, D_MODEL)  # junk at the padding
    valid = torch.zeros(2, width + steps, dtype=torch.bool)
    for i, (n, row) in enumerate(zip(lengths, rows, strict=True)):
        x[i, width - n :] = row[0]
        valid[i, width - n :] = True
    cache = mixer.new_cache(batch=2, max_len=width + steps)
    out = [mixer(x[:, :width], mask=valid[:, None, None, :width], causal=True, cache=cache)]
    for s in range(width, width + steps):
        out.append(mixer(x[:, s : s + 1], mask=valid[:, None, None, : s + 1], causal=True, cache=cache))
    out = torch.cat(out, dim=1)
    for i, (n, row) in enumerate(zip(lengths, rows, strict=True)):
        assert (out[i, width - n :] - mixer(row, causal=True)[0]).abs().max() <= 1e-5


@pytest.mark.parametrize("bidirectional", [True, False])
def test_right_padding(bidirectional: bool) -> None:
    mixer = make(bidirectional=bidirectional)
    lengths, width = [7, 2], 9
    x = torch.randn(2, width, D_MODEL)
    valid = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    out = mixer(x, mask=valid[:, None, None, :], causal=not bidirectional)
    for i, n in enumerate(lengths):
        alone = mixer(x[i : i + 1, :n], causal=not bidirectional)[0]
        assert (out[i, :n] - alone).abs().max() <= 1e-5


@pytest.mark.parametrize("bidirectional", [True, False])
def test_first_output_sees_last_token_only_if_bidirectional(bidirectional: bool) -> None:
    mixer = make(bidirectional=bidirectional)
    x = torch.randn(2, 8, D_MODEL)
    changed = x.clone()
    changed[:, -1] += 5.0
    before, after = mixer(x, causal=not bidirectional), mixer(changed, causal=not bidirectional)
    moved = (before[:, 0] - after[:, 0]).abs().max()  # small at init (dt ~ 1e-2), but far above rounding
    assert moved > 1e-5 if bidirectional else moved == 0


@pytest.mark.parametrize("bidirectional", [True, False])
def test_backward_gives_finite_gradients_everywhere(bidirectional: bool) -> None:
    mixer = make(bidirectional=bidirectional).train()
    x = torch.randn(2, 10, D_MODEL, requires_grad=True)
    valid = torch.ones(2, 10, dtype=torch.bool)
    valid[1, 7:] = False
    mixer(x, mask=valid[:, None, None, :], causal=not bidirectional).square().sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    assert torch.isfinite(x.grad).all()


def test_bad_calls_raise() -> None:
    causal, both = make(), make(bidirectional=True)
    x = torch.randn(1, 5, D_MODEL)
    with pytest.raises(ValueError, match="cross-attention"):
        causal(x, x, causal=True)
    with pytest.raises(ValueError, match="causal=False"):
        causal(x, causal=False)
    with pytest.raises(ValueError, match="causal=True"):
        both(x, causal=True)
    with pytest.raises(ValueError, match="cache"):
        both.new_cache(batch=1, max_len=5)
    with pytest.raises(ValueError, match="cache"):
        both(x, cache=causal.new_cache(batch=1, max_len=5))
    with pytest.raises(ValueError, match="mask"):
        causal(x, causal=True, mask=torch.ones(1, 1, 5, 5, dtype=torch.bool))  # a (T, S) mask
    with pytest.raises(ValueError, match="mask"):
        causal(x, causal=True, mask=torch.ones(1, 1, 1, 4, dtype=torch.bool))  # wrong S


def test_reorder_permutes_the_batch() -> None:
    mixer = make()
    cache = mixer.new_cache(batch=3, max_len=6)
    mixer(torch.randn(3, 6, D_MODEL), causal=True, cache=cache)
    conv, h = cache.conv.clone(), cache.h.clone()
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    assert isinstance(cache, SSMState) and cache.length == 6
    assert torch.equal(cache.conv, conv[index]) and torch.equal(cache.h, h[index])
