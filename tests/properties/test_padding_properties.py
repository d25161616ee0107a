"""Masks and padding, by property (Hypothesis): for random ragged batches, padding is invisible.

1. Each real token's output is the same whether its row is padded on the left, on the right, or not at
   all (the row run alone), in every attention kind that means it, and in all three families (GPT, BERT,
   the encoder-decoder: source padding, target padding).
2. A query that may see no key (a row made only of padding, or causal left padding before the first real
   token) gives zeros, never NaN: in each kernel, through the attention layer, through whole models, and
   in the gradients.
3. Kinds whose pattern is laid out in absolute positions (Linformer's projection, the Sparse Transformer's
   fixed blocks) are padding-invariant only where their definition says so; their tests say which.

The padding tokens carry large random values (or random ids), so a leak shows. Every batch mixes rows
padded on either side; each row's real tokens are compared with that row run alone.

B batch, T padded length, n a row's real length, H heads, Hk key/value heads, D head width, d width.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import Tensor

import tformer
from tformer.config import FAMILIES, AttentionConfig
from tformer.models.builders import build_kernel
from tformer.models.stacks import positions_for
from tformer.nn.attention import Attention
from tformer.nn.positions import Rotary
from tformer.nn.ssm import SSMMixer

VOCAB, PAD, MAX_LEN = 32, 0, 16
# A real token's output, padded or alone, differs only in the order of float sums (other matrix shapes).
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10)}
FAST = settings(max_examples=10, deadline=None, derandomize=True, database=None)
SLOW = settings(max_examples=6, deadline=None, derandomize=True, database=None)

# A batch: rows of (real length n, side of the padding); T = the longest n + `extra`. n = 0 is a row made
# only of padding, allowed where the test says so.
Rows = list[tuple[int, str]]
SIDES = st.sampled_from(["left", "right"])
ROWS = st.lists(st.tuples(st.integers(1, 8), SIDES), min_size=1, max_size=3)
ROWS_WITH_EMPTY = st.tuples(st.lists(st.tuples(st.integers(1, 8), SIDES), min_size=1, max_size=2),
                            st.integers(0, 2)).map(lambda r: [*r[0][:r[1]], (0, "right"), *r[0][r[1]:]])
EXTRA = st.integers(0, 4)
SEEDS = st.integers(0, 2**16)
DTYPES = st.sampled_from([torch.float32, torch.float64])
HEADS = st.sampled_from([(1, 1), (2, 2), (2, 1), (4, 2)])  # (H, Hk)

# Attention kinds that take key padding, with their options drawn small so the patterns really bite.
# Every kind here is invariant to padding on either side by construction (padded keys get no weight, and
# the windows, strided pattern ("sparse"), feature sums and LSH buckets are relative to the real tokens);
# "sparse-fixed" and "lowrank" are laid out in absolute positions and have their own tests below.
INVARIANT_KINDS = ["sdpa", "eager", "windowed", "sparse", "linear", "lsh"]
OPTIONS = st.fixed_dictionaries(dict(
    window=st.integers(1, 3), block=st.integers(1, 4), chunk=st.integers(1, 4),
    buckets=st.sampled_from([1, 2, 4]), rounds=st.integers(1, 2), seed=st.integers(0, 3)))


# --- building ragged batches --------------------------------------------------------------------------

def layout(rows: Rows, extra: int) -> Tensor:
    """(B, T) True at each row's real tokens, at its left or right end."""
    width = max(n for n, _ in rows) + extra
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (n, side) in enumerate(rows):
        start = width - n if side == "left" else 0
        valid[i, start:start + n] = True
    return valid


def place(parts: list[Tensor], valid: Tensor, fill: Tensor) -> Tensor:
    """Row i's (n_i, ...) tensor at its real positions of `fill` (B, T, ...), which keeps the padding."""
    out = fill.clone()
    out[valid] = torch.cat(parts)  # row-major order: row 0's real tokens first, in order
    return out


def real(x: Tensor, valid: Tensor, i: int) -> Tensor:
    """Row i's real positions of a (B, T, ...) tensor -> (n_i, ...)."""
    return x[i][valid[i]]


def tokens(rows: Rows, gen: torch.Generator) -> list[Tensor]:
    """Each row's real token ids (n,), never the pad id."""
    return [torch.randint(1, VOCAB, (n,), generator=gen) for n, _ in rows]


def padded_ids(parts: list[Tensor], valid: Tensor) -> Tensor:
    """Each row's ids (n,) at its real positions of a (B, T) batch of pad ids."""
    return place(parts, valid, torch.full(valid.shape, PAD))


def garbage(shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype) -> Tensor:
    """Large random values: what padding positions carry, so that a leak is visible."""
    return 5 * torch.randn(shape, generator=gen, dtype=dtype)


# --- kernels, directly ---------------------------------------------------------------------------------

def kernel_inputs(rows: Rows, valid: Tensor, *, heads: tuple[int, int], d: int, shared_qk: bool,
                  gen: torch.Generator, dtype: torch.dtype) -> tuple[list[tuple[Tensor, ...]], tuple[Tensor, ...]]:
    """Per row (q (1, H, n, D), k, v (1, Hk, n, D)) and the padded batch's (q (B, H, T, D), k, v)."""
    h, hk = heads
    b, t = valid.shape
    singles, batch = [], []
    for width in (h, hk, hk):
        parts = [torch.randn(n, width, d, generator=gen, dtype=dtype) for n, _ in rows]  # (n, H|Hk, D)
        full = place(parts, valid, garbage((b, t, width, d), gen, dtype)).transpose(1, 2)  # (B, H|Hk, T, D)
        singles.append([p.transpose(0, 1)[None] for p in parts])  # (1, H|Hk, n, D) each
        batch.append(full)
    if shared_qk:  # LSH: the keys are the unit-length queries
        singles[1] = [F.normalize(q, dim=-1) for q in singles[0]]
        batch[1] = F.normalize(batch[0], dim=-1)
    return list(zip(*singles, strict=True)), tuple(batch)


def run_kernel(kernel: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, valid: Tensor | None,
               causal: bool) -> Tensor:
    mask = None if valid is None else valid[:, None, None, :]  # (B, 1, 1, T)
    out, _ = kernel(q, k, v, mask=mask, causal=causal, scale=q.shape[-1] ** -0.5)
    return out  # (B, H, T, D)


def assert_rows_match_alone(kernel: torch.nn.Module, rows: Rows, extra: int, *, causal: bool, heads: tuple[int, int],
                            seed: int, dtype: torch.dtype, compare: Callable[[int, str], bool] = lambda n, s: True
                            ) -> int:
    """Every compared row's real outputs in the padded batch equal that row run alone. Returns how many
    rows were compared."""
    gen = torch.Generator().manual_seed(seed)
    valid = layout(rows, extra)
    singles, (q, k, v) = kernel_inputs(rows, valid, heads=heads, d=4, shared_qk=kernel.shared_qk, gen=gen,
                                       dtype=dtype)
    out = run_kernel(kernel, q, k, v, valid, causal).transpose(1, 2)  # (B, T, H, D)
    compared = 0
    for i, ((n, side), (qi, ki, vi)) in enumerate(zip(rows, singles, strict=True)):
        if not compare(valid.shape[1] - n, side):
            continue
        alone = run_kernel(kernel, qi, ki, vi, None, causal)[0].transpose(0, 1)  # (n, H, D)
        torch.testing.assert_close(real(out, valid, i), alone, **TOL[dtype])
        compared += 1
    return compared


def kernel_of(kind: str, options: dict, dtype: torch.dtype) -> torch.nn.Module:
    """The kernel the registry builds for `kind` ("sparse-fixed": the fixed pattern) with `options`."""
    name, _, pattern = kind.partition("-")
    config = AttentionConfig(kind=name, pattern=pattern or "strided", summary=1, **options)
    return build_kernel(config, max_len=MAX_LEN).to(dtype)


LSH_LEFT = dict(window=1, block=1, chunk=2, buckets=4, rounds=2, seed=0)


@pytest.mark.parametrize("kind", INVARIANT_KINDS)
@FAST
@given(options=OPTIONS, causal=st.booleans(), rows=ROWS, extra=EXTRA, heads=HEADS, seed=SEEDS, dtype=DTYPES)
# Regression (LSH): padding sorted ahead of the real tokens of its bucket moved their chunks.
@example(options=LSH_LEFT, causal=False, rows=[(5, "left")], extra=3, heads=(2, 2), seed=0, dtype=torch.float64)
@example(options=LSH_LEFT, causal=True, rows=[(7, "left"), (3, "right")], extra=4, heads=(2, 2), seed=1,
         dtype=torch.float64)
def test_kernel_outputs_of_real_tokens_ignore_padding(kind: str, options: dict, causal: bool, rows: Rows,
                                                      extra: int, heads: tuple[int, int], seed: int,
                                                      dtype: torch.dtype) -> None:
    """Left, right or no padding: the same outputs at the real tokens (exact within float tolerance: the
    padded keys get zero weight and the patterns are relative to the real tokens)."""
    if kind == "lsh":
        heads = (heads[0], heads[0])  # shared QK: one key per query head
    kernel = kernel_of(kind, options, dtype)
    assert assert_rows_match_alone(kernel, rows, extra, causal=causal, heads=heads, seed=seed, dtype=dtype) == len(rows)


@FAST
@given(block=st.integers(1, 4), rows=ROWS, extra=EXTRA, causal=st.booleans(), heads=HEADS, seed=SEEDS,
       dtype=DTYPES)
def test_fixed_sparse_pattern_ignores_padding_that_keeps_its_blocks(block: int, rows: Rows, extra: int,
                                                                   causal: bool, heads: tuple[int, int],
                                                                   seed: int, dtype: torch.dtype) -> None:
    """The fixed pattern (Child et al. 2019) is laid out in absolute positions: blocks j // l and summary
    columns j % l. So padding on the right never changes a real token's output, and padding on the left
    does not when it is a whole number of blocks; any other amount on the left moves the block boundaries,
    as the pattern's definition says, and is not compared."""
    kernel = kernel_of("sparse-fixed", dict(block=block), dtype)
    compared = assert_rows_match_alone(kernel, rows, extra, causal=causal, heads=heads, seed=seed, dtype=dtype,
                                       compare=lambda pads, side: side == "right" or pads % block == 0)
    assert compared == sum(side == "right" or (max(m for m, _ in rows) + extra - n) % block == 0
                           for n, side in rows)


@FAST
@given(rows=ROWS, extra=EXTRA, rank=st.integers(1, 8), heads=HEADS, seed=SEEDS, dtype=DTYPES)
def test_lowrank_ignores_right_padding_and_padding_contents(rows: Rows, extra: int, rank: int,
                                                           heads: tuple[int, int], seed: int,
                                                           dtype: torch.dtype) -> None:
    """Linformer projects the keys along the sequence with E[:, :S] (absolute positions), so it is not
    invariant to left padding, by design. What it documents: padded keys and values are zeroed before the
    projection, so (a) right padding only adds zero columns and changes nothing, and (b) whatever the
    padding holds never reaches the output, on either side."""
    kernel = kernel_of("lowrank", dict(rank=rank), dtype)
    assert_rows_match_alone(kernel, rows, extra, causal=False, heads=heads, seed=seed, dtype=dtype,
                            compare=lambda pads, side: side == "right" or pads == 0)
    valid = layout(rows, extra)
    gen = torch.Generator().manual_seed(seed)
    _, (q, k, v) = kernel_inputs(rows, valid, heads=heads, d=4, shared_qk=False, gen=gen, dtype=dtype)
    keep = valid[:, None, :, None]  # (B, 1, T, 1)
    k2 = torch.where(keep, k, garbage(k.shape, gen, dtype))
    v2 = torch.where(keep, v, garbage(v.shape, gen, dtype))
    out, out2 = run_kernel(kernel, q, k, v, valid, False), run_kernel(kernel, q, k2, v2, valid, False)
    torch.testing.assert_close(out2, out, **TOL[dtype])


@pytest.mark.parametrize("kind", [*INVARIANT_KINDS, "sparse-fixed", "lowrank"])
@FAST
@given(options=OPTIONS, causal=st.booleans(), rows=ROWS_WITH_EMPTY, extra=EXTRA, heads=HEADS, seed=SEEDS,
       dtype=DTYPES)
def test_kernel_queries_with_no_key_give_zeros(kind: str, options: dict, causal: bool, rows: Rows, extra: int,
                                               heads: tuple[int, int], seed: int, dtype: torch.dtype) -> None:
    """A row made only of padding (and, causal, the padding before a row's first real token) has no key
    to attend to: its output is zeros, and nothing anywhere is NaN or infinite."""
    causal = causal and kind != "lowrank"
    if kind == "lsh":
        heads = (heads[0], heads[0])
    kernel = kernel_of(kind, options, dtype)
    valid = layout(rows, extra)
    gen = torch.Generator().manual_seed(seed)
    _, (q, k, v) = kernel_inputs(rows, valid, heads=heads, d=4, shared_qk=kernel.shared_qk, gen=gen, dtype=dtype)
    out = run_kernel(kernel, q, k, v, valid, causal)  # (B, H, T, D)
    assert torch.isfinite(out).all()
    seen = valid.cummax(dim=1).values if causal else valid.any(dim=1, keepdim=True).expand_as(valid)  # (B, T)
    blind = ~seen  # queries with no real key they may see
    assert blind.any()
    torch.testing.assert_close(out.transpose(1, 2)[blind], torch.zeros_like(out.transpose(1, 2)[blind]),
                               atol=0, rtol=0)


@pytest.mark.parametrize("kind", INVARIANT_KINDS)
@FAST
@given(rope=st.booleans(), causal=st.booleans(), rows=ROWS_WITH_EMPTY, extra=EXTRA, seed=SEEDS, dtype=DTYPES)
def test_attention_layer_with_every_key_masked_is_finite(kind: str, rope: bool, causal: bool, rows: Rows,
                                                         extra: int, seed: int, dtype: torch.dtype) -> None:
    """Through the whole layer (projections, RoPE at positions counted from each row's first real token):
    a query with no key gets zeros from its kernel, so the layer gives exactly the output bias there; the
    real rows equal the row alone."""
    torch.manual_seed(seed)
    heads = 2
    kernel = kernel_of(kind, dict(window=1, block=2, chunk=2, buckets=2, rounds=1, seed=0), dtype)
    layer = Attention(d_model=16, n_heads=heads, n_kv_heads=heads if kind == "lsh" else 1, head_dim=8,
                      kernel=kernel, rotary=Rotary(max_len=MAX_LEN, head_dim=8) if rope else None)
    layer = layer.to(dtype).eval()
    with torch.no_grad():
        layer.out_proj.bias.normal_()
    valid = layout(rows, extra)
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.randn(n, 16, generator=gen, dtype=dtype) for n, _ in rows]
    x = place(parts, valid, garbage((*valid.shape, 16), gen, dtype))  # (B, T, d)
    with torch.no_grad():
        out = layer(x, mask=valid[:, None, None, :], causal=causal, positions=positions_for(valid, valid=valid))
        assert torch.isfinite(out).all()
        seen = valid.cummax(dim=1).values if causal else valid.any(dim=1, keepdim=True).expand_as(valid)
        blind = out[~seen]  # (number of blind queries, d)
        torch.testing.assert_close(blind, layer.out_proj.bias.expand_as(blind), atol=0, rtol=0)
        for i, part in enumerate(parts):
            if len(part):
                alone = layer(part[None], causal=causal, positions=torch.arange(len(part))[None])[0]
                torch.testing.assert_close(real(out, valid, i), alone, **TOL[dtype])


@FAST
@given(causal=st.booleans(), conv=st.integers(1, 4), chunk=st.integers(1, 4), rows=ROWS_WITH_EMPTY | ROWS,
       extra=EXTRA, seed=SEEDS, dtype=DTYPES)
def test_ssm_mixer_ignores_padding(causal: bool, conv: int, chunk: int, rows: Rows, extra: int, seed: int,
                                   dtype: torch.dtype) -> None:
    """The state-space mixer zeroes padding's input and step (dt = 0), so the state passes padding
    unchanged: either side, either direction of the scan, real outputs equal the row alone; all finite."""
    torch.manual_seed(seed)
    mixer = SSMMixer(d_model=16, state=4, expand=2, conv=conv, chunk=chunk, bidirectional=not causal).to(dtype)
    valid = layout(rows, extra)
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.randn(n, 16, generator=gen, dtype=dtype) for n, _ in rows]
    x = place(parts, valid, garbage((*valid.shape, 16), gen, dtype))  # (B, T, d)
    with torch.no_grad():
        out = mixer(x, mask=valid[:, None, None, :], causal=causal)
        assert torch.isfinite(out).all()
        for i, part in enumerate(parts):
            if len(part):
                torch.testing.assert_close(real(out, valid, i), mixer(part[None], causal=causal)[0], **TOL[dtype])


# --- whole models -------------------------------------------------------------------------------------

MODEL_KINDS = ["sdpa", "eager", "windowed", "sparse", "linear", "lsh", "ssm"]  # every family holds these
POSITIONS = ["learned", "sinusoidal", "none", "rope", "alibi"]
ARCH = st.fixed_dictionaries(dict(  # a tiny model, whatever its attention kind
    d_model=st.sampled_from([16, 32]), n_heads=st.sampled_from([2, 4]), mqa=st.booleans(),
    n_layers=st.integers(1, 2), positions=st.sampled_from(POSITIONS), placement=st.sampled_from(["pre", "post"]),
    window=st.integers(1, 3), block=st.integers(1, 4), chunk=st.integers(1, 4), buckets=st.sampled_from([1, 2, 4]),
    conv=st.integers(1, 4)))
TINY = dict(d_model=16, n_heads=2, mqa=False, n_layers=1, positions="learned", placement="pre", window=1, block=3,
            chunk=2, buckets=4, conv=2)


def model_config(kind: str, arch: dict) -> dict:
    """The config of a tiny model with self-attention `kind`; positions that cannot go with the kind
    (RoPE and ALiBi with the SSM mixer, ALiBi with an inexact kind) fall back to learned ones."""
    positions = arch["positions"]
    if (kind == "ssm" and positions in ("rope", "alibi")) or (positions == "alibi" and kind not in ("sdpa", "eager")):
        positions = "learned"
    return dict(
        vocab_size=VOCAB, d_model=arch["d_model"], n_heads=arch["n_heads"],
        n_kv_heads=1 if arch["mqa"] and kind != "lsh" else arch["n_heads"], d_ff=32, n_layers=arch["n_layers"],
        max_len=MAX_LEN, pad_id=PAD, positions=dict(kind=positions), norm=dict(placement=arch["placement"]),
        attention=dict(kind=kind, window=arch["window"], block=arch["block"], summary=1, chunk=arch["chunk"],
                       buckets=arch["buckets"], rounds=2, state=4, expand=2, conv=arch["conv"]))


def build(family: str, config: dict, seed: int, dtype: torch.dtype) -> torch.nn.Module:
    """The model, with every weight moved well off its small initial value (outputs then vary by token),
    in eval mode (no dropout)."""
    torch.manual_seed(seed)
    model = tformer.build_model(FAMILIES[family](**config))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.to(dtype).eval()


@pytest.mark.parametrize("kind", MODEL_KINDS)
@SLOW
@given(arch=ARCH, rows=ROWS_WITH_EMPTY | ROWS, extra=EXTRA, seed=SEEDS, dtype=DTYPES)
# Regression: learned positions counted from column 0, not from the first real token, under left padding.
@example(arch=TINY, rows=[(6, "left"), (3, "right")], extra=3, seed=0, dtype=torch.float64)
def test_gpt_real_logits_ignore_padding(kind: str, arch: dict, rows: Rows, extra: int, seed: int,
                                        dtype: torch.dtype) -> None:
    """GPT with a key-padding mask `valid`: positions count from each row's first real token (as ragged
    generation needs), so a left-padded, right-padded or unpadded row gives the same logits; a row made
    only of padding gives finite logits, and so do the gradients of a loss on the real tokens."""
    model = build("gpt", model_config(kind, arch), seed, dtype)
    gen = torch.Generator().manual_seed(seed)
    valid = layout(rows, extra)
    parts = tokens(rows, gen)
    logits = model(padded_ids(parts, valid), valid=valid)  # (B, T, V)
    assert torch.isfinite(logits).all()
    logits[valid].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with torch.no_grad():
        for i, part in enumerate(parts):
            if len(part):
                torch.testing.assert_close(real(logits.detach(), valid, i), model(part[None])[0], **TOL[dtype])


@settings(FAST, max_examples=12)
@given(kind=st.sampled_from(MODEL_KINDS), arch=ARCH, lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       steps=st.integers(1, 3), seed=SEEDS, dtype=DTYPES)
def test_gpt_cached_decoding_of_a_left_padded_batch(kind: str, arch: dict, lengths: list[int], steps: int,
                                                    seed: int, dtype: torch.dtype) -> None:
    """Ragged generation: left-padded prompts through the cache (prefill, then one token per step, `valid`
    growing, positions left to the model) give each row the logits of its own tokens run alone, uncached."""
    model = build("gpt", model_config(kind, arch), seed, dtype)
    gen = torch.Generator().manual_seed(seed)
    rows = [(n, "left") for n in lengths]
    valid = layout(rows, 0)
    parts = tokens(rows, gen)
    new = torch.randint(1, VOCAB, (len(rows), steps), generator=gen)  # (B, steps): the tokens fed next
    caches = model.new_caches(len(rows), valid.shape[1] + steps)
    with torch.no_grad():
        logits = [model(padded_ids(parts, valid), valid=valid, caches=caches)]  # [(B, P, V)]
        for step in range(steps):
            valid = torch.cat([valid, valid.new_ones(len(rows), 1)], dim=1)  # (B, S)
            logits.append(model(new[:, step:step + 1], valid=valid, caches=caches))  # (B, 1, V)
        logits = torch.cat(logits, dim=1)  # (B, P + steps, V)
        for i, part in enumerate(parts):
            alone = model(torch.cat([part, new[i]])[None])[0]  # (n + steps, V)
            torch.testing.assert_close(real(logits, valid, i), alone, **TOL[dtype])


@pytest.mark.parametrize("kind", MODEL_KINDS)
@SLOW
@given(arch=ARCH, rows=ROWS_WITH_EMPTY | ROWS, extra=EXTRA, seed=SEEDS, dtype=DTYPES)
@example(arch=TINY, rows=[(6, "left"), (2, "right")], extra=3, seed=0, dtype=torch.float64)  # as for GPT
def test_bert_real_outputs_ignore_padding(kind: str, arch: dict, rows: Rows, extra: int, seed: int,
                                          dtype: torch.dtype) -> None:
    """BERT (bidirectional): masked-LM logits at real tokens are the same for any padding; the pooled
    [CLS] vector (read at column 0) and the next-sentence logits are the same for right padding, BERT's
    convention (left padding puts a pad token in column 0). All finite, rows of padding included."""
    model = build("bert", model_config(kind, arch), seed, dtype)
    gen = torch.Generator().manual_seed(seed)
    valid = layout(rows, extra)
    parts = tokens(rows, gen)
    with torch.no_grad():
        mlm, nsp = model(padded_ids(parts, valid), valid=valid)  # (B, T, V), (B, 2)
        assert torch.isfinite(mlm).all() and torch.isfinite(nsp).all()
        for i, (part, (_, side)) in enumerate(zip(parts, rows, strict=True)):
            if len(part):
                mlm_alone, nsp_alone = model(part[None])
                torch.testing.assert_close(real(mlm, valid, i), mlm_alone[0], **TOL[dtype])
                if side == "right":
                    torch.testing.assert_close(nsp[i], nsp_alone[0], **TOL[dtype])


@pytest.mark.parametrize("kind", MODEL_KINDS)
@SLOW
@given(arch=ARCH, src_rows=ROWS_WITH_EMPTY | ROWS, tgt_sides=st.lists(SIDES, min_size=3, max_size=3),
       tgt_lengths=st.lists(st.integers(1, 6), min_size=3, max_size=3), extra=EXTRA, seed=SEEDS, dtype=DTYPES)
@example(arch=TINY, src_rows=[(6, "left"), (2, "right")], tgt_sides=["left", "right", "left"],
         tgt_lengths=[4, 2, 1], extra=3, seed=0, dtype=torch.float64)  # as for GPT, source and target
def test_encoder_decoder_real_outputs_ignore_padding(kind: str, arch: dict, src_rows: Rows, tgt_sides: list[str],
                                                     tgt_lengths: list[int], extra: int, seed: int,
                                                     dtype: torch.dtype) -> None:
    """Encoder-decoder: source padding on either side changes neither the encoder output at real tokens
    nor, through cross-attention, the decoder's logits; target padding (given as `tgt_valid`) on either
    side does not change the logits at real target tokens. A source made only of padding gives finite
    logits (cross-attention with no key gives zeros)."""
    model = build("seq2seq", model_config(kind, arch), seed, dtype)
    gen = torch.Generator().manual_seed(seed)
    src_valid = layout(src_rows, extra)
    tgt_rows = list(zip(tgt_lengths, tgt_sides, strict=True))[:len(src_rows)]
    tgt_valid = layout(tgt_rows, extra)
    src_parts, tgt_parts = tokens(src_rows, gen), tokens(tgt_rows, gen)
    with torch.no_grad():
        memory = model.encode(padded_ids(src_parts, src_valid), src_valid)  # (B, S, d)
        logits = model.decode(padded_ids(tgt_parts, tgt_valid), memory, src_valid, tgt_valid=tgt_valid)
        assert torch.isfinite(memory).all() and torch.isfinite(logits).all()
        for i, (src, tgt) in enumerate(zip(src_parts, tgt_parts, strict=True)):
            if not len(src):
                continue
            memory_alone = model.encode(src[None])  # (1, n, d)
            torch.testing.assert_close(real(memory, src_valid, i), memory_alone[0], **TOL[dtype])
            alone = model.decode(tgt[None], memory_alone, torch.ones(1, len(src), dtype=torch.bool))[0]
            torch.testing.assert_close(real(logits, tgt_valid, i), alone, **TOL[dtype])


@SLOW
@given(kind=st.sampled_from(MODEL_KINDS), arch=ARCH, rows=ROWS, extra=EXTRA,
       tgt_lengths=st.lists(st.integers(1, 6), min_size=3, max_size=3), seed=SEEDS, dtype=DTYPES)
def test_encoder_decoder_forward_with_pad_ids(kind: str, arch: dict, rows: Rows, extra: int, tgt_lengths: list[int],
                                             seed: int, dtype: torch.dtype) -> None:
    """Teacher forcing through `forward(src, tgt)`, which finds the padding from `pad_id` alone: source
    padding on either side and target padding on the right (the decoder is causal, so later padding is
    never seen) leave the real logits as for the pair alone."""
    model = build("seq2seq", model_config(kind, arch), seed, dtype)
    gen = torch.Generator().manual_seed(seed)
    src_valid = layout(rows, extra)
    tgt_rows = [(n, "right") for n in tgt_lengths[:len(rows)]]
    tgt_valid = layout(tgt_rows, extra)
    src_parts, tgt_parts = tokens(rows, gen), tokens(tgt_rows, gen)
    with torch.no_grad():
        logits = model(padded_ids(src_parts, src_valid), padded_ids(tgt_parts, tgt_valid))  # (B, T, V)
        for i, (src, tgt) in enumerate(zip(src_parts, tgt_parts, strict=True)):
            torch.testing.assert_close(real(logits, tgt_valid, i), model(src[None], tgt[None])[0], **TOL[dtype])


@pytest.mark.parametrize("family", ["bert", "seq2seq"])
@SLOW
@given(arch=ARCH, rows=ROWS, extra=EXTRA, rank=st.integers(1, 8), seed=SEEDS, dtype=DTYPES)
def test_lowrank_encoders_ignore_right_padding(family: str, arch: dict, rows: Rows, extra: int, rank: int, seed: int,
                                              dtype: torch.dtype) -> None:
    """Linformer encoders (BERT, the encoder-decoder's encoder): right padding changes no real output; left
    padding is out of scope (the projection is over absolute positions, see the kernel's test)."""
    rows = [(n, "right") for n, _ in rows]
    config = model_config("lowrank", arch)
    config["attention"]["rank"] = rank
    model = build(family, config, seed, dtype)
    gen = torch.Generator().manual_seed(seed)
    valid = layout(rows, extra)
    parts = tokens(rows, gen)
    ids = padded_ids(parts, valid)
    with torch.no_grad():
        run = (lambda x, v=None: model(x, valid=v)[0]) if family == "bert" else (lambda x, v=None: model.encode(x, v))
        out = run(ids, valid)
        for i, part in enumerate(parts):
            torch.testing.assert_close(real(out, valid, i), run(part[None])[0], **TOL[dtype])
