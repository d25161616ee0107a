"""Scoring with a causal Transformer (the NADE view) and with the encoder-decoder: the masked model is a
normalised density, its outputs at t never depend on tokens after t, batched == one at a time, the sliding
window, perplexity / bits-per-character on hand-computable models, and log p(y | x) == beam search's."""

import itertools
import math

import pytest
import torch
from torch import Tensor, nn

import tformer
from tformer.decoding import (
    beam_search,
    conditional_log_probs,
    length_penalty,
    rerank,
    score_sequences,
    score_texts,
    token_log_probs,
)

V, BOS = 5, 1
GPT_VARIANTS = {
    "learned-pre-ln": ("gpt-tiny", {}),
    "rope-rmsnorm-gqa": ("llama-tiny", {"n_kv_heads": 2}),
}


def tiny_gpt(variant: str, *, vocab: int = V, max_len: int = 16, seed: int = 0) -> nn.Module:
    """A tiny random GPT with a sharp (far from uniform) next-token distribution, so that a misaligned or
    leaking scorer would visibly break normalisation. Left in train mode: scoring switches dropout off."""
    name, overrides = GPT_VARIANTS[variant]
    torch.manual_seed(seed)
    config = tformer.preset(name, {"vocab_size": vocab, "d_model": 16, "n_heads": 4, "d_ff": 32, "n_layers": 2,
                                   "max_len": max_len, "tie_embeddings": False, **overrides})
    model = tformer.build_model(config)
    with torch.no_grad():
        nn.init.normal_(model.lm_head.weight, std=1.5)
    return model


def all_sequences(length: int) -> Tensor:
    return torch.tensor(list(itertools.product(range(V), repeat=length)))  # (V ** length, length)


# --- the NADE: a normalised density whose outputs at t see only x_<=t ----------------------------------

@pytest.mark.parametrize("variant", GPT_VARIANTS)
def test_probabilities_of_all_sequences_sum_to_one(variant: str) -> None:
    model = tiny_gpt(variant)
    ids = all_sequences(3)  # (125, 3)
    log_probs = token_log_probs(model, ids, bos_id=BOS)  # (125, 3)
    assert log_probs.exp().max() > 0.5  # sharp: not a near-uniform model where anything sums to ~1
    assert float(log_probs.double().sum(dim=1).exp().sum()) == pytest.approx(1.0, abs=1e-5)
    # Without a start token the first token is context: for each x_0, p(x_1, x_2 | x_0) sums to one.
    given_first = token_log_probs(model, ids).double().sum(dim=1).exp().view(V, V * V).sum(dim=1)  # (V,)
    torch.testing.assert_close(given_first, torch.ones(V, dtype=torch.float64), atol=1e-5, rtol=0)


class LooksAhead(nn.Module):
    """A broken causal LM: its logits at t are the model's at t + 1, which have already seen x_{t+1}."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.config = model, model.config

    def forward(self, ids: Tensor) -> Tensor:
        logits = self.model(ids)  # (B, T, V)
        return torch.cat([logits[:, 1:], logits[:, -1:]], dim=1)  # (B, T, V): position t reads t + 1


@pytest.mark.parametrize("variant", GPT_VARIANTS)
def test_sum_to_one_is_a_real_check(variant: str) -> None:
    """The library's scorer over a model that peeks one token ahead gives no density: the test above would
    catch an off-by-one or a leak."""
    leaky = LooksAhead(tiny_gpt(variant))
    log_probs = token_log_probs(leaky, all_sequences(3), bos_id=BOS)  # (125, 3)
    total = float(log_probs.double().sum(dim=1).exp().sum())
    assert abs(total - 1.0) > 0.1


@pytest.mark.parametrize("variant", GPT_VARIANTS)
def test_prefix_property(variant: str) -> None:
    """Changing tokens after position t changes neither the logits nor the log-probs at positions <= t."""
    model = tiny_gpt(variant).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (4, 10), generator=g)
    for t in (0, 3, 8):
        changed = ids.clone()
        changed[:, t + 1:] = torch.randint(0, V, (4, 10 - t - 1), generator=g)
        with torch.no_grad():
            torch.testing.assert_close(model(changed)[:, :t + 1], model(ids)[:, :t + 1], atol=1e-6, rtol=0)
        for bos in (None, BOS):
            torch.testing.assert_close(token_log_probs(model, changed, bos_id=bos)[:, :t + 1],
                                       token_log_probs(model, ids, bos_id=bos)[:, :t + 1], atol=1e-6, rtol=0)


# --- batching, padding, sliding window -----------------------------------------------------------------

def random_sequences(n: int, *, seed: int, longest: int, vocab: int = V) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, longest + 1, (n,), generator=g).tolist()
    return [torch.randint(0, vocab, (k,), generator=g).tolist() for k in lengths]


@pytest.mark.parametrize("variant", GPT_VARIANTS)
@pytest.mark.parametrize("bos", [None, BOS])
def test_batched_equals_one_at_a_time(variant: str, bos: int | None) -> None:
    model = tiny_gpt(variant)
    sequences = random_sequences(7, seed=2, longest=12)
    batched = score_sequences(model, sequences, bos_id=bos, batch_size=4)
    for seq, score in zip(sequences, batched, strict=True):
        alone = token_log_probs(model, torch.tensor([seq]), bos_id=bos)[0]  # (T,)
        expected = alone if bos is not None else alone[1:]
        assert score.n_tokens == len(seq) - (bos is None)
        torch.testing.assert_close(score.token_log_probs, expected, atol=1e-5, rtol=0)
        assert score.log_prob == pytest.approx(float(expected.sum()), abs=1e-4)
    assert model.training  # scoring gave the model back its mode


def test_padded_positions_are_zero_and_padding_must_be_on_the_right() -> None:
    model = tiny_gpt("learned-pre-ln")
    ids = torch.tensor([[2, 3, 4, 0, 0], [2, 3, 4, 1, 2]])
    valid = torch.tensor([[True] * 3 + [False] * 2, [True] * 5])
    out = token_log_probs(model, ids, valid=valid, bos_id=BOS)  # (2, 5)
    assert (out[0, 3:] == 0).all() and (out[:, :3] < 0).all()
    torch.testing.assert_close(out[0, :3], out[1, :3])  # right padding does not touch the real tokens
    with pytest.raises(ValueError, match="right-padded"):
        token_log_probs(model, ids, valid=valid.flip(1))


@pytest.mark.parametrize("variant", GPT_VARIANTS)
def test_sliding_window_gives_each_token_the_context_of_its_window(variant: str) -> None:
    """max_len 6: a 20-token sequence is scored in windows. With stride 1 every token past the first
    window sees exactly the 5 tokens before it; any stride agrees with the direct score in the first
    window, and batched windows equal one-at-a-time windows."""
    model, n = tiny_gpt(variant, max_len=6), 6
    seq = torch.randint(0, V, (1, 20), generator=torch.Generator().manual_seed(3))
    windowed = token_log_probs(model, seq, stride=1)[0]  # (20,)
    torch.testing.assert_close(windowed[:n], token_log_probs(model, seq[:, :n])[0])
    for j in range(n, 20):
        context = token_log_probs(model, seq[:, j - n + 1:j + 1])[0, -1]
        torch.testing.assert_close(windowed[j], context)
    for stride in (2, 3, 5):
        other = token_log_probs(model, seq, stride=stride, bos_id=BOS)[0]  # (20,)
        torch.testing.assert_close(other[:n - 1], token_log_probs(model, seq[:, :n - 1], bos_id=BOS)[0])
        assert other.isfinite().all() and (other <= 0).all()
    sequences = random_sequences(5, seed=4, longest=17)
    batched = score_sequences(model, sequences, bos_id=BOS, batch_size=5, stride=2)
    alone = [score_sequences(model, [s], bos_id=BOS, stride=2)[0] for s in sequences]
    for a, b in zip(batched, alone, strict=True):
        torch.testing.assert_close(a.token_log_probs, b.token_log_probs, atol=1e-5, rtol=0)


def test_direct_score_when_the_sequence_fits() -> None:
    model = tiny_gpt("learned-pre-ln", max_len=8)
    seq = torch.randint(0, V, (3, 7))
    direct = token_log_probs(model, seq, bos_id=BOS)  # 8 positions with the start token: one window
    for stride in (1, 4, 7):
        torch.testing.assert_close(token_log_probs(model, seq, bos_id=BOS, stride=stride), direct)
    with pytest.raises(ValueError, match="stride"):
        token_log_probs(model, seq, stride=8)


def test_bad_input() -> None:
    model = tiny_gpt("learned-pre-ln")
    with pytest.raises(ValueError, match="nothing to score"):
        score_sequences(model, [[2, 3], [4]])
    with pytest.raises(ValueError, match="batch, length"):
        token_log_probs(model, torch.tensor([1, 2, 3]))


# --- perplexity, bits per character: hand-computable models --------------------------------------------

class Unigram(nn.Module):
    """A 'language model' whose next-token distribution is always `probs`, whatever the prefix."""

    def __init__(self, probs: list[float], *, max_len: int = 64) -> None:
        super().__init__()
        self.config = tformer.GPTConfig(vocab_size=len(probs), d_model=4, n_heads=1, d_ff=4, n_layers=1,
                                        max_len=max_len)
        self.register_buffer("log_probs", torch.tensor(probs).log())  # (V,)

    def forward(self, ids: Tensor) -> Tensor:
        return self.log_probs.expand(*ids.shape, -1)  # (B, T, V)


class CharTokenizer:
    """One id per character in `alphabet`, after the four special tokens."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, alphabet: str) -> None:
        self.alphabet = alphabet

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[4 + self.alphabet.index(c) for c in text] for text in texts]


def test_perplexity_of_a_fixed_distribution() -> None:
    model = Unigram([0.1, 0.5, 0.25, 0.15])
    (with_bos, without) = score_sequences(model, [[1, 2, 2]], bos_id=0) + score_sequences(model, [[1, 2, 2]])
    assert with_bos.log_prob == pytest.approx(math.log(0.5 * 0.25 * 0.25))
    assert with_bos.perplexity == pytest.approx(32 ** (1 / 3))  # (1/32) ** (-1/3)
    assert without.n_tokens == 2 and without.perplexity == pytest.approx(4.0)  # the first token is context
    assert with_bos.perplexity == pytest.approx(math.exp(-float(with_bos.token_log_probs.mean())))


def test_bits_per_character_and_byte() -> None:
    """A uniform model over 8 tokens costs exactly 3 bits per token; one character per token, 'é' being
    two UTF-8 bytes."""
    tokenizer = CharTokenizer("abé!")
    model = Unigram([1 / 8] * 8)
    abba, accent = score_texts(model, tokenizer, ["abba", "é!"])
    assert (abba.n_tokens, abba.n_chars, abba.n_bytes) == (4, 4, 4)
    assert abba.bits_per_char == pytest.approx(3.0) and abba.bits_per_byte == pytest.approx(3.0)
    assert (accent.n_chars, accent.n_bytes) == (2, 3)
    assert accent.bits_per_char == pytest.approx(3.0) and accent.bits_per_byte == pytest.approx(2.0)
    assert accent.perplexity == pytest.approx(8.0)
    (free_first,) = score_texts(model, tokenizer, ["abba"], bos=False)
    assert free_first.n_tokens == 3 and free_first.bits_per_char == pytest.approx(9 / 4)


# --- the encoder-decoder: log p(y | x) ------------------------------------------------------------------

PAD, EOS = 0, 2


def tiny_seq2seq(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    config = tformer.preset("transformer-tiny", {"vocab_size": 24, "d_model": 32, "d_ff": 64, "max_len": 32,
                                                 "tie_embeddings": False, "output_bias": True})
    model = tformer.build_model(config)
    with torch.no_grad():
        model.lm_head.bias[EOS] = 2.0  # end at different lengths
    return model


def source_batch(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 24, (n,), generator=g).tolist() for n in (3, 7, 1, 5)]


@pytest.mark.parametrize("seed", [0, 1])
def test_conditional_log_prob_equals_beam_search_log_prob(seed: int) -> None:
    model, sources = tiny_seq2seq(seed), source_batch(seed)
    src = torch.tensor([s + [PAD] * (7 - len(s)) for s in sources])  # (4, 7)
    nbest = beam_search(model, src, beam=3, n_best=3, lenpen=0.0, max_len_a=0.0, max_len_b=6)
    pairs = [(sources[i], h) for i, hyps in enumerate(nbest) for h in hyps]
    assert any(h.eos for _, h in pairs)
    for eos in (True, False):
        chosen = [(s, h) for s, h in pairs if h.eos == eos]
        got = conditional_log_probs(model, [s for s, _ in chosen], [h.tokens for _, h in chosen], eos=eos,
                                    batch_size=3)
        assert got == pytest.approx([h.log_prob for _, h in chosen], abs=1e-4)


def test_rerank_orders_by_length_normalised_log_prob() -> None:
    model, source = tiny_seq2seq(0), source_batch(0)[1]
    candidates = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [], [5, 6, 7]]
    log_probs = conditional_log_probs(model, [source] * len(candidates), candidates)
    for lenpen in (0.0, 1.0):
        ranked = rerank(model, source, candidates, lenpen=lenpen)
        scores = [lp / length_penalty(len(y) + 1, lenpen=lenpen) for y, lp in zip(candidates, log_probs,
                                                                                 strict=True)]
        order = sorted(range(len(candidates)), key=lambda i: scores[i], reverse=True)
        assert [h.tokens for h in ranked] == [candidates[i] for i in order]
        assert [h.score for h in ranked] == pytest.approx([scores[i] for i in order], abs=1e-6)
        assert all(h.eos for h in ranked)
    # Beam search's own n-best come back in its order, with its scores.
    src = torch.tensor([source])
    hyps = beam_search(model, src, beam=4, n_best=4, lenpen=1.0, max_len_a=0.0, max_len_b=8)[0]
    finished = [h for h in hyps if h.eos]
    ranked = rerank(model, source, [h.tokens for h in reversed(finished)], lenpen=1.0)
    assert [h.tokens for h in ranked] == [h.tokens for h in finished]
    assert [h.score for h in ranked] == pytest.approx([h.score for h in finished], abs=1e-4)
    assert rerank(model, source, []) == []
