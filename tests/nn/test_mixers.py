"""Every attention kind and the state-space mixer in each family, chosen by config: forward, backward,
and cached decoding equal to recomputation (GPT logits and encoder-decoder greedy / beam output); positions
(RoPE, ALiBi) in all three families; the config's refusals.

B batch, S keys so far, V vocabulary.
"""

import pytest
import torch

import tformer
from tformer.config import FAMILIES
from tformer.decoding import beam_search, greedy
from tformer.decoding.generate import left_pad, next_logits
from tformer.nn.attention import Attention
from tformer.nn.ssm import SSMMixer

VOCAB = 64
OPTIONS = dict(window=3, block=4, summary=1, rank=8, buckets=4, rounds=2, chunk=4, state=4, expand=2, conv=3)
KINDS = ["sdpa", "eager", "windowed", "sparse", "sparse-fixed", "lowrank", "linear", "lsh", "ssm"]
CAUSAL_KINDS = [k for k in KINDS if k != "lowrank"]
SIZES = dict(vocab_size=VOCAB, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=32)


def attention(kind: str) -> dict:
    name, _, pattern = kind.partition("-")
    return dict(kind=name, pattern=pattern or "strided", **OPTIONS)


def positions(kind: str) -> dict:
    return dict(kind="learned" if kind == "ssm" else "rope")  # RoPE where it applies, so it is exercised too


@torch.no_grad()
def spread(model: torch.nn.Module) -> torch.nn.Module:
    """Move every weight off its small initial value so that logits vary and ties are unlikely."""
    torch.manual_seed(0)
    for p in model.parameters():
        p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def build(family: str, kind: str, **extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    config = FAMILIES[family](**SIZES, attention=attention(kind), positions=positions(kind), **extra)
    return tformer.build_model(config)


def lm_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, VOCAB, (3, 12))
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[1, 9:] = False
    return ids, valid


def assert_trains(model: torch.nn.Module, loss: torch.Tensor) -> None:
    assert torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"no gradient reached {missing}"
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("kind", KINDS)
def test_bert_forward_backward(kind: str) -> None:
    model = build("bert", kind)
    ids, valid = lm_batch()
    mlm, nsp = model(ids, valid=valid)
    assert mlm.shape == (3, 12, VOCAB) and nsp.shape == (3, 2)
    assert_trains(model, mlm.logsumexp(-1).mean() + nsp.logsumexp(-1).mean())
    mixer = model.bert.encoder.layers[0].mixer
    assert isinstance(mixer, SSMMixer if kind == "ssm" else Attention)


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_gpt_forward_backward_and_causality(kind: str) -> None:
    model = build("gpt", kind).eval()
    ids, _ = lm_batch()
    logits = model(ids)
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % VOCAB
    assert torch.equal(model(changed)[:, :8], logits[:, :8])  # no position sees the future
    assert_trains(model.train(), logits.logsumexp(-1).mean())


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
@torch.no_grad()
def test_gpt_cached_logits_equal_recomputing_the_prefix(kind: str) -> None:
    model = spread(build("gpt", kind)).double()
    prompts = [[5, 9, 13, 2, 7], [3, 8, 40, 41, 42]]
    ids, valid = left_pad(prompts, pad_id=0)
    continuation = torch.randint(0, VOCAB, (2, 9))  # long enough to cross windows, blocks and chunks
    caches = model.new_caches(2, ids.shape[1] + continuation.shape[1])
    for step in range(continuation.shape[1] + 1):
        cached = next_logits(model, ids, valid, caches=caches)  # (B, V)
        full = next_logits(model, ids, valid, caches=None)
        torch.testing.assert_close(cached, full, atol=1e-9, rtol=1e-9)
        if step < continuation.shape[1]:
            ids = torch.cat([ids, continuation[:, step : step + 1]], dim=1)  # (B, S + 1)
            valid = torch.cat([valid, valid.new_ones(2, 1)], dim=1)


@pytest.mark.parametrize("kind", KINDS)
def test_seq2seq_forward_backward_and_cached_decoding(kind: str) -> None:
    model = build("seq2seq", kind)
    src = torch.randint(3, VOCAB, (3, 10))
    src[1, 7:] = 0
    tgt = torch.randint(3, VOCAB, (3, 8))
    logits = model(src, tgt)
    assert logits.shape == (3, 8, VOCAB)
    assert_trains(model, logits.logsumexp(-1).mean())
    decoder_mixer = model.decoder.layers[0].mixer
    if kind == "lowrank":  # bidirectional only: the encoder's attention, exact in the decoder
        assert model.encoder.layers[0].mixer.kernel.__class__.__name__ == "LowRankAttention"
        assert decoder_mixer.kernel.exact
    spread(model)
    assert greedy(model, src, max_len_b=12) == greedy(model, src, max_len_b=12, use_cache=False)
    cached, uncached = (beam_search(model, src, beam=2, n_best=2, max_len_b=12, use_cache=c) for c in (True, False))
    assert [[h.tokens for h in s] for s in cached] == [[h.tokens for h in s] for s in uncached]


@pytest.mark.parametrize("family", ["seq2seq", "bert", "gpt"])
@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rope", "alibi"])
def test_every_position_kind_in_every_family(family: str, pos: str) -> None:
    torch.manual_seed(0)
    model = tformer.build_model(FAMILIES[family](**SIZES, positions=dict(kind=pos)))
    ids = torch.randint(3, VOCAB, (2, 10))
    out = model(ids, ids) if family == "seq2seq" else model(ids)
    outs = out if isinstance(out, tuple) else (out,)  # BERT: masked-LM and next-sentence logits
    assert_trains(model, sum(o.logsumexp(-1).mean() for o in outs))


def test_kind_is_chosen_by_cli_style_overrides() -> None:
    config = tformer.config.from_dict(tformer.GPTConfig, {"attention": "linear"})
    assert config.attention.kind == "linear"
    config = tformer.config.from_dict(tformer.GPTConfig, {"attention": {"kind": "windowed", "window": 16}})
    assert (config.attention.kind, config.attention.window) == ("windowed", 16)
    assert tformer.GPTConfig(attention="eager").attention.kind == "eager"  # the old string form still loads


@pytest.mark.parametrize("overrides,match", [
    (dict(attention=dict(kind="lowrank", rank=8)), "cannot be causal"),
    (dict(attention="windowed", positions="alibi"), "alibi needs exact attention"),
    (dict(attention="ssm", positions="rope"), "would do nothing"),
    (dict(attention="lsh", n_kv_heads=2), "must equal n_heads"),
    (dict(attention="flash"), "attention.kind='flash' is not allowed"),
    (dict(attention=dict(kind="sparse", block=4, summary=5)), "summary=5 must be <="),
    (dict(attention=dict(kind="lsh", buckets=3)), "buckets=3 must be 1 or even"),
    (dict(attention=dict(kind="windowed", window=0)), "window=0 must be a positive integer"),
])
def test_bad_attention_configs(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tformer.GPTConfig(**SIZES, **overrides)
