"""Decoder-only generation: cached decoding == re-running the whole prefix (logits to 1e-5, and tokens) for
learned positions, RoPE with grouped-query attention, and ALiBi; a left-padded batch == one prompt at a
time; stop tokens, streaming, seeds, input checks; and greedy output equal to `transformers`' own
`generate` on imported GPT-2 and Llama weights.

B batch, S keys so far, V vocabulary.
"""

from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

import tformer
from tformer.decoding import Decoder, generate, generate_greedy
from tformer.decoding.generate import left_pad, next_logits

VOCAB = 64
PROMPTS = [[5, 9, 13, 2, 7], [3, 8], [11, 4, 4, 9, 1, 6, 12], [17]]  # lengths 5, 2, 7, 1
VARIANTS = {
    "learned": ("gpt-tiny", {}),
    "rope-gqa": ("llama-tiny", {}),
    "alibi": ("gpt-tiny", {"positions": {"kind": "alibi"}}),
}


@torch.no_grad()
def tiny_model(variant: str, *, max_len: int = 32) -> nn.Module:
    """A seeded tiny GPT with every weight moved off its (small) initial value, so that logits are spread
    out and greedy tokens vary. Left in train mode with dropout: generation must switch to eval itself."""
    torch.manual_seed(0)
    name, overrides = VARIANTS[variant]
    config = tformer.preset(name, {"vocab_size": VOCAB, "max_len": max_len, "tie_embeddings": False,
                                   "dropout": {"embed": 0.1, "residual": 0.1}, **overrides})
    model = tformer.build_model(config)
    for p in model.parameters():
        p.add_(0.3 * torch.randn_like(p))
    return model.train()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("variant", list(VARIANTS))
@torch.no_grad()
def test_cached_logits_equal_recomputing_the_prefix(variant: str, dtype: torch.dtype) -> None:
    # In float64 rounding is ~1e-15, so 1e-5 catches any cache error. In float32 the cached and full passes
    # multiply matrices of different shapes, whose rounding differs by up to ~10 ulps of these logits
    # (|logit| up to 8.4 here, 1.06e-5 seen for rope-gqa on a 2-core AVX2 machine): 1e-5 relative as well.
    model = tiny_model(variant).eval().to(dtype)
    rtol = 0.0 if dtype == torch.float64 else 1e-5
    ids, valid = left_pad(PROMPTS, pad_id=0)  # (B, P)
    continuation = torch.randint(0, VOCAB, (len(PROMPTS), 6))  # tokens fed after the prompt
    caches = model.new_caches(len(PROMPTS), ids.shape[1] + continuation.shape[1])
    for step in range(continuation.shape[1] + 1):
        cached = next_logits(model, ids, valid, caches=caches)  # (B, V)
        full = next_logits(model, ids, valid, caches=None)
        torch.testing.assert_close(cached, full, atol=1e-5, rtol=rtol)
        if step < continuation.shape[1]:
            ids = torch.cat([ids, continuation[:, step : step + 1]], dim=1)  # (B, S + 1)
            valid = torch.cat([valid, valid.new_ones(len(PROMPTS), 1)], dim=1)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_tokens_equal_uncached(variant: str) -> None:
    model = tiny_model(variant)
    for options in (dict(temperature=0.0), dict(temperature=0.8, top_k=20, top_p=0.9, seed=3)):
        cached = generate(model, PROMPTS, max_new_tokens=10, **options)
        assert cached == generate(model, PROMPTS, max_new_tokens=10, use_cache=False, **options)
        assert all(len(row) == 10 for row in cached)
        assert len({tuple(row) for row in cached}) > 1  # not a degenerate model
    assert model.training  # mode restored


def test_the_head_reads_only_the_positions_whose_logits_are_used() -> None:
    """`last=k` gives the last k positions' logits; generation's prefill (and each step) asks for one, so
    the vocabulary-wide head never runs over a whole prompt."""
    model = tiny_model("rope-gqa").eval()
    ids = torch.tensor([PROMPTS[2]])  # (1, 7)
    with torch.no_grad():
        full = model(ids)  # (1, 7, V)
        torch.testing.assert_close(model(ids, last=3), full[:, -3:], atol=1e-5, rtol=0)
        for bad in (0, 8):
            with pytest.raises(ValueError, match=f"last={bad}: the logits of 1 to 7"):
                model(ids, last=bad)
    rows_seen = []
    model.lm_head.register_forward_hook(lambda module, args, out: rows_seen.append(args[0].shape[1]))
    generate_greedy(model, PROMPTS, max_new_tokens=4)
    assert rows_seen == [1, 1, 1, 1]  # the prefill of 7 columns, then three steps: one position each


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_batched_left_padded_equals_one_at_a_time(variant: str) -> None:
    model = tiny_model(variant)
    batched = generate_greedy(model, PROMPTS, max_new_tokens=8, pad_id=VOCAB - 1)
    assert batched == [generate_greedy(model, [p], max_new_tokens=8)[0] for p in PROMPTS]


def test_stop_tokens_end_rows_and_are_not_returned() -> None:
    model = tiny_model("rope-gqa")
    free = generate_greedy(model, PROMPTS, max_new_tokens=12)
    stops = (free[0][3], free[2][6])
    stopped = {cache: generate_greedy(model, PROMPTS, max_new_tokens=12, stop_tokens=stops, use_cache=cache)
               for cache in (True, False)}
    expected = [row[: min([row.index(s) for s in stops if s in row], default=len(row))] for row in free]
    assert stopped[True] == stopped[False] == expected
    assert len(expected[0]) <= 3 and len({len(row) for row in expected}) > 1  # rows stop at different steps


def test_on_token_streams_every_returned_token_in_order() -> None:
    model = tiny_model("learned")
    seen: list[tuple[int, int]] = []
    out = generate(model, PROMPTS, max_new_tokens=5, seed=0, on_token=lambda row, token: seen.append((row, token)))
    for row in range(len(PROMPTS)):
        assert [t for r, t in seen if r == row] == out[row]
    assert [r for r, _ in seen[: len(PROMPTS)]] == list(range(len(PROMPTS)))  # one step for every row first


def test_seeds() -> None:
    model = tiny_model("learned")
    same = [generate(model, PROMPTS, max_new_tokens=8, seed=7) for _ in range(2)]
    assert same[0] == same[1]
    assert same[0] != generate(model, PROMPTS, max_new_tokens=8, seed=8)


def test_fills_the_context_exactly() -> None:
    model = tiny_model("learned", max_len=16)
    out = generate_greedy(model, [[1] * 6, [2]], max_new_tokens=10)
    assert [len(row) for row in out] == [10, 10]
    assert generate_greedy(model, [[1]], max_new_tokens=0) == [[]]


@pytest.mark.parametrize(("prompts", "options", "match"), [
    ([], {}, "prompts is empty"),
    ([[1, 2], []], {}, r"prompt\(s\) \[1\] are empty"),
    ([[1] * 10], dict(max_new_tokens=23), "10 tokens.*max_new_tokens=23.*max_len=32"),
    ([[1]], dict(max_new_tokens=-1), "max_new_tokens=-1"),
    ([[1]], dict(top_p=2.0), "top_p=2.0"),
    ([[1, VOCAB]], {}, f"token id {VOCAB}"),
])
def test_bad_input_is_a_value_error(prompts: list, options: dict, match: str) -> None:
    model = tiny_model("learned")
    with pytest.raises(ValueError, match=match):
        generate(model, prompts, **{"max_new_tokens": 4, **options})
    assert model.training


# --- against Hugging Face transformers ------------------------------------------------------------------

HF_CONFIGS = {
    "gpt2": lambda: transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_head=4, n_inner=64, n_layer=2,
                                            n_positions=32, bos_token_id=None, eos_token_id=None),
    "llama": lambda: transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4,
                                              num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2,
                                              max_position_embeddings=32, bos_token_id=None, eos_token_id=None),
}


@pytest.mark.parametrize("model_type", list(HF_CONFIGS))
@torch.no_grad()
def test_greedy_equals_transformers_generate(model_type: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(HF_CONFIGS[model_type]())
    for p in hf.parameters():
        p.add_(0.3 * torch.randn_like(p))
    hf.eval().save_pretrained(tmp_path)
    ours, _ = tformer.from_hf(tmp_path)
    prompts = PROMPTS[:3]
    ids, valid = left_pad(prompts, pad_id=0)  # (B, P)
    n = 12
    hf_out = hf.generate(ids, attention_mask=valid.long(), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)[:, ids.shape[1]:].tolist()
    assert generate_greedy(ours, prompts, max_new_tokens=n) == hf_out
    for prompt, expected in zip(prompts, hf_out, strict=True):  # batch 1: no padding at all
        one = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                          pad_token_id=0)[0, len(prompt):].tolist()
        assert one == expected == generate_greedy(ours, [prompt], max_new_tokens=n)[0]


def test_decoding_layout_keeps_values_and_is_undone() -> None:
    """Inside generation every linear weight is column-major with the same values; afterwards row-major."""
    from tformer.decoding.layout import DecodingLayout

    model = tiny_model("learned")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with DecodingLayout(model).applied():
        linears = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
        assert all(w.t().is_contiguous() and not w.is_contiguous() for w in linears)
        assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert all(p.is_contiguous() for p in model.parameters())
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    generate(model, PROMPTS, max_new_tokens=3)
    assert all(p.is_contiguous() and not p.is_inference() for p in model.parameters())
    model(torch.tensor([PROMPTS[0]])).sum().backward()  # still trainable after generating


def test_decoding_layout_copies_once_and_follows_changes() -> None:
    """A layout's column-major copies are reused by its next use (no copy), and remade when a weight changes
    in place (an optimizer step) or is replaced (a dtype round trip)."""
    from tformer.decoding.layout import DecodingLayout

    model = tiny_model("learned")
    layout = DecodingLayout(model)
    weight = next(m.weight for m in model.modules() if isinstance(m, nn.Linear))
    with layout.applied():
        first = weight.data_ptr()
    row_major = weight.data_ptr()
    with layout.applied():
        assert weight.data_ptr() == first  # the same copy: nothing was made
    assert weight.data_ptr() == row_major  # the same original: nothing was copied back
    with torch.no_grad():
        weight.add_(1.0)
    expected = weight.detach().clone()
    with layout.applied():
        assert torch.equal(weight, expected)  # remade after the in-place change
    model.half().float()  # new data, perhaps at a freed address, with the version unchanged
    expected = weight.detach().clone()
    with layout.applied():
        assert torch.equal(weight, expected) and not weight.is_contiguous()
    decoder = Decoder(model)
    decoder.layout = layout
    generate(decoder, PROMPTS, max_new_tokens=3)
    assert all(p.is_contiguous() for p in model.parameters())


def test_a_decoder_keeps_its_layout_and_a_bare_model_keeps_none() -> None:
    """Decoding one row with a `Decoder` reuses its layout's copies from call to call; with a bare model, the
    copies live for the call only: nothing of the model is kept anywhere once it is dropped."""
    import gc
    import weakref

    model = tiny_model("learned")
    decoder = Decoder(model)
    layout = decoder.layout
    one = [PROMPTS[0]]
    alone = generate_greedy(model, one, max_new_tokens=3)
    assert generate_greedy(decoder, one, max_new_tokens=3) == alone
    copies = {name: kept[2] for name, kept in layout._copies.items()}
    assert copies  # made by the first call
    assert generate_greedy(decoder, one, max_new_tokens=3) == alone
    assert all(layout._copies[name][2] is copy for name, copy in copies.items())  # reused, not remade
    gone = weakref.ref(model)
    del model, layout, copies, decoder
    gc.collect()
    assert gone() is None  # no module-level cache holds the model or its copies
