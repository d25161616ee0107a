"""The library's one check of each decoding value that the command line and the server share (`check_beam`,
`check_top`, `check_max_new_tokens`: the range, and the value named as its caller calls it), and its one
reading of a text: a leading byte-order mark is no part of it in any inference function
(`data.lines.normalise_text`), while a U+FEFF inside a text is a character."""

from __future__ import annotations

import importlib

import pytest
import torch

import tformer
from tformer.decoding import Decoder, SampleConfig
from tformer.decoding.beam import check_beam
from tformer.decoding.generate import check_max_new_tokens
from tformer.inference import (
    DecodeConfig,
    check_top,
    continue_prompt,
    prompt_ids,
    sample_prompts,
    score_lines,
    score_pairs,
    token_scores,
    top_labels,
    translate,
)
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.viz.attention import attention_maps

TINY = {"d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1, "max_len": 32, "init": {"kind": "normal", "std": 0.5}}
TEXT = ["the cat sees the dog", "a big red house", "the small blue cat sleeps"]
BOM = "\ufeff"


@pytest.mark.parametrize("call, message", [
    (lambda: check_beam(0), "beam=0 must be at least 1 (1 = greedy)"),
    (lambda: check_beam(-3, what="decode.beam"), "decode.beam=-3 must be at least 1 (1 = greedy)"),
    (lambda: check_beam(300, vocab_size=300), "beam=300 is not allowed; give 1 (greedy) to 299 (fewer than the "
                                              "vocabulary's 300 tokens)"),
    (lambda: check_beam(17, vocab_size=300, most=16, limit="this server's most"),
     "beam=17 is not allowed; give 1 (greedy) to 16 (this server's most)"),
    (lambda: check_beam(12, vocab_size=10, most=16, limit="this server's most"),  # the tighter bound is named
     "beam=12 is not allowed; give 1 (greedy) to 9 (fewer than the vocabulary's 10 tokens)"),
    (lambda: check_top(0), "top=0 must be a positive integer (the labels to return)"),
    (lambda: check_top(-1, what="--top"), "--top=-1 must be a positive integer (the labels to return)"),
    (lambda: check_top(2**63), f"top={2**63} does not fit 64 bits; give an integer in [1, 2**63 - 1]"),
    (lambda: check_max_new_tokens(-1, most=20, limit="--max-new-tokens"), "max_new_tokens=-1 must be >= 0"),
    (lambda: check_max_new_tokens(-1, what="--max-new-tokens"), "--max-new-tokens=-1 must be >= 0"),
    (lambda: check_max_new_tokens(21, most=20, limit="--max-new-tokens"),
     "max_new_tokens=21 is not allowed; give 0 to 20 (--max-new-tokens)"),
])
def test_one_check_of_each_value(call: object, message: str) -> None:
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == message


def test_values_in_range_pass() -> None:
    check_beam(1)
    check_beam(16, vocab_size=300, most=16)
    check_top(1)
    check_top(2**63 - 1)
    check_max_new_tokens(0, most=20)
    check_max_new_tokens(20, most=20)
    assert DecodeConfig(beam=1).beam == 1


def test_every_inference_function_drops_a_leading_byte_order_mark() -> None:
    torch.manual_seed(0)
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    chars = CharTokenizer.train(TEXT)
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    seq2seq = tformer.build_model(tformer.preset("transformer-tiny", {**TINY, "vocab_size": bpe.vocab_size}))
    gpt = tformer.build_model(tformer.preset("gpt-tiny", {**TINY, "vocab_size": chars.vocab_size,
                                                          "bos_id": chars.eos_id, "eos_id": chars.eos_id}))
    classifier = tformer.BertClassifier(tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size,
                                                                     "n_labels": 3}))
    for model in (seq2seq, gpt, classifier):
        model.eval()
    plain, marked = "the big cat", BOM + "the big cat"
    decode = DecodeConfig(beam=2, max_len_b=5)
    assert translate(seq2seq, bpe, [marked, BOM], decode) == translate(seq2seq, bpe, [plain, ""], decode)
    assert top_labels(classifier, pieces, [marked], top=3) == top_labels(classifier, pieces, [plain], top=3)
    (got,), (want,) = score_lines(gpt, chars, [marked]), score_lines(gpt, chars, [plain])
    assert (got.log_prob, got.n_tokens, got.n_chars) == (want.log_prob, want.n_tokens, want.n_chars)
    assert token_scores(chars, marked, got) == token_scores(chars, plain, want)
    assert score_pairs(seq2seq, bpe, [f"{marked}\t{BOM}a cat"], where="t") == \
        score_pairs(seq2seq, bpe, [f"{plain}\ta cat"], where="t")
    assert prompt_ids(chars, gpt.config, marked) == prompt_ids(chars, gpt.config, plain)
    shown: list[str] = []
    greedy = SampleConfig(temperature=0.0)
    assert continue_prompt(gpt, chars, marked, greedy, max_new_tokens=5, on_text=shown.append) == \
        continue_prompt(gpt, chars, plain, SampleConfig(temperature=0.0), max_new_tokens=5)
    assert shown[0] == plain  # the prompt streamed as it was read
    for model, tokenizer, target in ((seq2seq, bpe, BOM + "a cat"), (gpt, chars, None), (classifier, pieces, None)):
        got_maps = attention_maps(model, tokenizer, marked, target=target)
        want_maps = attention_maps(model, tokenizer, plain, target=None if target is None else target[1:])
        for g, w in zip(got_maps, want_maps, strict=True):
            assert (g.queries, g.keys) == (w.queries, w.keys) and torch.equal(g.weights, w.weights)
    inside = score_lines(gpt, chars, [f"the{BOM} big cat"])[0]
    assert inside.n_tokens == want.n_tokens + 1  # a mark inside a text is a character


def test_a_line_too_long_names_truncate_as_the_python_api_spells_it() -> None:
    """translate and top_labels refuse a text longer than the context and say `truncate=True` (the command line
    says --truncate instead: tests/cli/test_errors_text.py)."""
    torch.manual_seed(0)
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    seq2seq = tformer.build_model(tformer.preset("transformer-tiny", {**TINY, "vocab_size": bpe.vocab_size})).eval()
    classifier = tformer.BertClassifier(tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size,
                                                                     "n_labels": 3})).eval()
    long = " ".join(TEXT * 10)
    for call in (lambda: translate(seq2seq, bpe, ["a cat", long], DecodeConfig(beam=1), where="in.txt"),
                 lambda: top_labels(classifier, pieces, ["a cat", long], where="in.txt")):
        with pytest.raises(ValueError) as e:
            call()
        message = str(e.value)
        assert message.startswith("in.txt:2: the line is ") and "longer than the model's context max_len=32" in message
        assert message.endswith("; shorten it, or cut it to the context on purpose (truncate=True)")
        assert "--truncate" not in message


def test_sampling_many_prompts_shares_one_holder_of_captured_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each prompt and sample is its own generation; on a GPU they replay the steps captured for the first
    (of the same shape) instead of recording their own."""
    module = importlib.import_module("tformer.inference.generate")
    seen = []
    real = module.sample

    def spy(decoder, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(decoder)
        return real(decoder, *args, **kwargs)

    monkeypatch.setattr(module, "sample", spy)
    chars = CharTokenizer.train(TEXT)
    gpt = tformer.build_model(tformer.preset("gpt-tiny", {**TINY, "vocab_size": chars.vocab_size,
                                                          "bos_id": chars.eos_id, "eos_id": chars.eos_id})).eval()
    samples = list(sample_prompts(gpt, chars, ["the", "a cat"], SampleConfig(seed=1), num_samples=2,
                                  max_new_tokens=3))
    assert len(samples) == len(seen) == 4
    assert all(isinstance(d, Decoder) and d is seen[0] and d.model is gpt for d in seen)
    held = Decoder(gpt)
    list(sample_prompts(held, chars, ["the"], max_new_tokens=3))
    assert seen[-1] is held
