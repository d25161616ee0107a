"""Greedy and beam-search decoding of the encoder-decoder: cached == uncached, batched == one sentence at a
time, beam 1 == greedy, scores == teacher-forced log-probabilities, and a toy model on which greedy is
provably worse than beam 2."""

import math

import pytest
import torch
from torch import Tensor, nn

import tformer
from tformer.decoding import Hypothesis, beam_search, greedy, length_penalty
from tformer.decoding.beam import _stay
from tformer.decoding.steps import next_log_probs, next_scores

PAD, START, EOS = 0, 1, 2
SEEDS = [0, 1, 2, 3]


def random_model(seed: int, *, eos_bias: float = 2.0, **overrides: object) -> nn.Module:
    """A tiny random model with a small vocabulary and a bias on the end symbol, so that sentences of one
    batch end at different steps. Left in train mode: decoding must switch dropout off itself."""
    torch.manual_seed(seed)
    config = tformer.preset("transformer-tiny", {"vocab_size": 24, "tie_embeddings": False,
                                                 "output_bias": True, **overrides})
    model = tformer.build_model(config)
    with torch.no_grad():
        model.lm_head.bias[EOS] = eos_bias
    return model


def padded_batch(seed: int) -> Tensor:
    """(5, 9) source ids of real lengths 3, 9, 6, 1, 9, padded with PAD."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 24, (5, 9), generator=g)
    for row, n in enumerate([3, 9, 6, 1, 9]):
        src[row, n:] = PAD
    return src


def real(src: Tensor, row: int) -> Tensor:
    """Sentence `row` alone, without padding: (1, n)."""
    return src[row : row + 1, : int((src[row] != PAD).sum())]


def teacher_forced_log_prob(model: nn.Module, src: Tensor, tokens: list[int], eos: bool) -> float:
    """log p(tokens [+ eos] | src) from one teacher-forced forward pass; src (1, S)."""
    targets = tokens + [EOS] * eos
    inputs = torch.tensor([[START] + targets[:-1]])  # (1, T)
    with torch.no_grad():
        log_probs = torch.log_softmax(model.eval()(src, inputs).float(), dim=-1)[0]  # (T, V)
    return float(log_probs[torch.arange(len(targets)), torch.tensor(targets)].sum())


class Bigram(nn.Module):
    """A stub whose next-token distribution depends only on the previous token: probs[previous]. Same
    interface as EncoderDecoder (encode / decode / new_caches), no caches needed."""

    def __init__(self, probs: list[list[float]]) -> None:
        super().__init__()
        v = len(probs)
        self.config = tformer.Seq2SeqConfig(vocab_size=v, d_model=4, n_heads=1, d_ff=4, n_layers=1, max_len=32)
        self.register_buffer("table", torch.tensor(probs).clamp_min(1e-9).log())  # (V, V)

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> Tensor:
        return torch.zeros(*src.shape, 1)  # (B, S, 1)

    def decode(self, tgt: Tensor, memory: Tensor, src_valid: Tensor, *, tgt_valid: Tensor | None = None,
               caches: list | None = None, offset: int = 0) -> Tensor:
        return self.table[tgt]  # (B, T, V)

    def new_caches(self, batch: int, max_len: int) -> list:
        return []


# --- greedy ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_cached_matches_uncached_and_one_at_a_time(seed: int) -> None:
    model, src = random_model(seed), padded_batch(seed)
    cached = greedy(model, src)
    assert cached == greedy(model, src, use_cache=False)
    assert cached == [greedy(model, real(src, i))[0] for i in range(src.shape[0])]
    assert all(EOS not in tokens and START not in tokens for tokens in cached)


@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_step_scores_pick_the_log_probabilities_argmax(seed: int) -> None:
    model = random_model(seed).eval()
    src = padded_batch(seed)
    valid = src != PAD
    memory = model.encode(src, valid)
    prefix = torch.randint(3, 24, (5, 4), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        scores = next_scores(model, prefix, memory, valid, caches=None)  # (B, V)
        log_probs = next_log_probs(model, prefix, memory, valid, caches=None)
    assert torch.equal(scores.argmax(-1), log_probs.argmax(-1))
    assert torch.isinf(scores[:, PAD]).all() and torch.isfinite(scores[:, 1:]).all()


def test_greedy_batch_where_some_sentences_finish_early() -> None:
    """Over the seeds, some batch mixes sentences that stop at the end symbol with ones cut at their
    maximum length, so the tests above do cover rows leaving the batch early."""
    mixed = []
    for seed in SEEDS:
        src = padded_batch(seed)
        limits = [int(1.2 * int((row != PAD).sum()) + 10) for row in src]
        lengths = [len(t) for t in greedy(random_model(seed), src)]
        mixed.append(any(n < m for n, m in zip(lengths, limits, strict=True))
                     and any(n == m for n, m in zip(lengths, limits, strict=True)))
        assert all(n <= m for n, m in zip(lengths, limits, strict=True))
    assert any(mixed)


def test_greedy_max_length_per_sentence() -> None:
    """Never ending: each sentence runs to int(a * its real length + b), capped at the model's max_len."""
    model, src = random_model(0, eos_bias=-100.0), padded_batch(0)
    lengths = [len(t) for t in greedy(model, src, max_len_a=0.5, max_len_b=2)]
    assert lengths == [int(0.5 * n + 2) for n in [3, 9, 6, 1, 9]]
    capped = random_model(0, eos_bias=-100.0, max_len=12)
    assert [len(t) for t in greedy(capped, src, max_len_b=100)] == [12] * 5


def test_greedy_stops_at_eos_and_restores_train_mode() -> None:
    model = random_model(0, eos_bias=100.0)
    assert model.training
    assert greedy(model, padded_batch(0)) == [[]] * 5
    assert model.training
    model.eval()
    greedy(model, padded_batch(0))
    assert not model.training


VARIANTS = {  # name: (seed, overrides); seeds picked so that each batch mixes early and late ends
    "rope-pre-ln-gqa": (5, dict(positions=dict(kind="rope"), norm=dict(placement="pre"), n_kv_heads=2)),
    "alibi-eager-mqa": (5, dict(positions=dict(kind="alibi"), attention="eager", n_kv_heads=1)),
    "learned-3-decoder-layers": (3, dict(positions=dict(kind="learned"), n_decoder_layers=3)),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decoding_across_variants(variant: str) -> None:
    seed, overrides = VARIANTS[variant]
    model, src = random_model(seed, eos_bias=0.5, **overrides), padded_batch(seed)
    assert greedy(model, src) == greedy(model, src, use_cache=False)
    cached, uncached = (beam_search(model, src, beam=2, n_best=2, use_cache=c) for c in (True, False))
    assert [[h.tokens for h in s] for s in cached] == [[h.tokens for h in s] for s in uncached]


@pytest.mark.parametrize("search", [greedy, beam_search])
def test_cached_steps_feed_one_token_and_cross_attend_once(search: object) -> None:
    """With caches, the decoder's self-attention projects one new token per row and step, and the
    cross-attention projects the encoder output once, at the first step, for the B sentences only."""
    model, src = random_model(0), padded_batch(0)
    layer = model.decoder.layers[0]
    seen: dict[str, list[tuple[int, ...]]] = {"self": [], "cross": []}
    hooks = [layer.mixer.k_proj.register_forward_hook(lambda m, i, o: seen["self"].append(i[0].shape)),
             layer.cross_attn.k_proj.register_forward_hook(lambda m, i, o: seen["cross"].append(i[0].shape))]
    search(model, src)
    for hook in hooks:
        hook.remove()
    assert seen["cross"] == [(5, 9, 64)]
    assert len(seen["self"]) > 1 and all(shape[1] == 1 for shape in seen["self"])


# --- beam search -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_beam_1_without_length_penalty_is_greedy(seed: int) -> None:
    model, src = random_model(seed), padded_batch(seed)
    hyps = beam_search(model, src, beam=1, lenpen=0.0)
    assert [h[0].tokens for h in hyps] == greedy(model, src)


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_cached_matches_uncached_and_one_at_a_time(seed: int) -> None:
    model, src = random_model(seed), padded_batch(seed)
    cached = beam_search(model, src, beam=3, n_best=3)
    uncached = beam_search(model, src, beam=3, n_best=3, use_cache=False)
    alone = [beam_search(model, real(src, i), beam=3, n_best=3)[0] for i in range(src.shape[0])]
    for other in (uncached, alone):
        assert [[h.tokens for h in s] for s in cached] == [[h.tokens for h in s] for s in other]
        for mine, theirs in zip(sum(cached, []), sum(other, []), strict=True):
            assert mine.log_prob == pytest.approx(theirs.log_prob, abs=1e-4)


@pytest.mark.parametrize("lenpen_kind,lenpen", [("fairseq", 1.0), ("fairseq", 0.0), ("gnmt", 0.6)])
def test_beam_hypotheses_sorted_and_scored(lenpen_kind: str, lenpen: float) -> None:
    """Best first; score = log_prob / lp(len with eos); log_prob = the teacher-forced log-probability, which
    checks the bookkeeping of tokens, scores and reordered caches."""
    model, src = random_model(1), padded_batch(1)
    results = beam_search(model, src, beam=4, n_best=4, lenpen=lenpen, lenpen_kind=lenpen_kind)
    assert len(results) == 5
    for row, hyps in enumerate(results):
        assert len(hyps) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            length = len(h.tokens) + h.eos
            expected = h.log_prob / (length**lenpen if lenpen_kind == "fairseq" else ((5 + length) / 6) ** lenpen)
            assert h.score == pytest.approx(expected, rel=1e-6)
            assert h.log_prob == pytest.approx(teacher_forced_log_prob(model, real(src, row), h.tokens, h.eos),
                                               abs=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_scores_at_least_greedy(seed: int) -> None:
    """A sanity check (not a theorem): on a random model, beam 4's best is no worse than greedy's output
    under the same length normalisation, when it searches until none can beat the finished ("best")."""
    model, src = random_model(seed), padded_batch(seed)
    beams = beam_search(model, src, beam=4, stopping="best")
    for row, (tokens, hyps) in enumerate(zip(greedy(model, src), beams, strict=True)):
        eos = len(tokens) < int(1.2 * real(src, row).shape[1] + 10)
        greedy_score = teacher_forced_log_prob(model, real(src, row), tokens, eos) / (len(tokens) + eos)
        assert hyps[0].score >= greedy_score - 1e-5


def test_beam_2_beats_greedy_on_a_toy_model() -> None:
    """From the start symbol, a (0.6) beats b (0.4); but a is followed by the end symbol with 0.4 and b with
    0.9. Greedy takes a, eos (p = 0.24); beam 2 keeps b and finds b, eos (p = 0.36)."""
    #        pad  start eos  a     b
    probs = [[.2, .2, .2, .2, .2],  # after pad (unused)
             [0., 0., 0., .6, .4],  # after the start symbol
             [.2, .2, .2, .2, .2],  # after eos (unused)
             [0., 0., .4, .3, .3],  # after a
             [0., 0., .9, .05, .05]]  # after b
    model, src = Bigram(probs), torch.tensor([[3, 4]])
    assert greedy(model, src) == [[3]]
    (best, second), = beam_search(model, src, beam=2, n_best=2, lenpen=0.0)
    assert best == Hypothesis(tokens=[4], score=pytest.approx(math.log(0.36)), log_prob=pytest.approx(
        math.log(0.36)), eos=True)
    assert second.tokens == [3] and second.log_prob == pytest.approx(math.log(0.24))
    assert beam_search(model, src, beam=2, use_cache=False)[0][0].tokens == [4]


# From the start symbol: the end symbol (0.74) or a (0.25), which then repeats itself with 0.99.
#                pad  start eos   a     b
EOS_OR_A_LOOP = [[.2, .2, .2, .2, .2],
                 [0., 0., .74, .25, .01],
                 [.2, .2, .2, .2, .2],
                 [0., 0., .005, .99, .005],
                 [0., 0., 1., 0., 0.]]


def test_beam_keeps_going_while_a_live_hypothesis_can_still_win() -> None:
    """The end symbol first (0.74) finishes a hypothesis at once (score log 0.74 = -0.30); the live one
    (a, 0.25, then a with 0.99) would lose if it ended next (log 0.25 / 2 = -0.69) but can still win
    at the maximum length (log 0.25 / 6 = -0.23), so beam 1 goes on, and does win. Without length
    normalisation it cannot, and beam 1 stops there, like greedy. (All under stopping="best".)"""
    model, src = Bigram(EOS_OR_A_LOOP), torch.tensor([[3]])
    assert greedy(model, src) == [[]]
    assert beam_search(model, src, beam=1, lenpen=0.0, stopping="best")[0][0].tokens == []
    (h, short), = beam_search(model, src, beam=2, n_best=2, lenpen=1.0, max_len_a=0, max_len_b=6, stopping="best")
    assert h.tokens == [3] * 6 and not h.eos
    assert h.score == pytest.approx((math.log(0.25) + 5 * math.log(0.99)) / 6)
    assert short.tokens == [] and short.eos and short.score == pytest.approx(math.log(0.74))
    (one,), = beam_search(model, src, beam=1, lenpen=1.0, max_len_a=0, max_len_b=6, stopping="best")
    assert one.tokens == [3] * 6


def test_stopping_finished_ends_once_beam_hypotheses_have_finished() -> None:
    """The same toy model: under "finished" (fairseq, CTranslate2) beam 1 stops at the end symbol it found
    first, as greedy does, where "best" searches on and finds the longer, better-scored hypothesis; beam 2
    stops at step 2, once b, eos has finished too, where "best" goes on to the maximum length."""
    model, src = Bigram(EOS_OR_A_LOOP), torch.tensor([[3]])
    limits = dict(lenpen=1.0, max_len_a=0, max_len_b=6)
    assert beam_search(model, src, beam=1, stopping="finished", **limits)[0][0].tokens == []
    assert beam_search(model, src, beam=1, stopping="best", **limits)[0][0].tokens == [3] * 6
    two = beam_search(model, src, beam=2, n_best=2, stopping="finished", **limits)[0]
    assert [h.tokens for h in two] == [[], [4]]
    best = beam_search(model, src, beam=2, n_best=2, stopping="best", **limits)[0]
    assert [h.tokens for h in best] == [[3] * 6, []]


@pytest.mark.parametrize("seed", SEEDS)
def test_stopping_finished_cached_matches_uncached_alone_and_never_beats_best(seed: int) -> None:
    model, src = random_model(seed), padded_batch(seed)
    first = beam_search(model, src, beam=3, stopping="finished")
    uncached = beam_search(model, src, beam=3, stopping="finished", use_cache=False)
    alone = [beam_search(model, real(src, i), beam=3, stopping="finished")[0] for i in range(src.shape[0])]
    for other in (uncached, alone):
        assert [s[0].tokens for s in first] == [s[0].tokens for s in other]
    best = beam_search(model, src, beam=3, stopping="best")
    assert all(f[0].score <= b[0].score + 1e-5 for f, b in zip(first, best, strict=True))


@pytest.mark.parametrize("parents", [[0, 1, 2, 3], [0, 0, 1, 2], [3, 3, 3, 3], [2, 0, 2, 1], [1, 3, 3, 0]])
def test_stay_leaves_each_parents_first_child_in_its_place(parents: list[int]) -> None:
    """Beam search's placement: a permutation of each sentence's hypotheses that keeps a child at each parent's
    place, so that only K - (distinct parents) rows of the caches move."""
    beam = len(parents)
    local = torch.tensor([parents, parents[::-1]])  # (N, K) two sentences
    rows = local + torch.arange(2)[:, None] * beam  # (N, K) indices into the N * K old rows
    order = _stay(rows, beam)  # (N, K)
    assert sorted(order[0].tolist()) == list(range(beam)) and sorted(order[1].tolist()) == list(range(beam))
    placed = local.gather(1, order)  # (N, K) each place's parent
    for row in placed.tolist():
        assert {p for j, p in enumerate(row) if p == j} == set(row)  # every parent keeps a child in its place
        assert sum(p != j for j, p in enumerate(row)) == beam - len(set(row))


def test_length_penalty_formulas() -> None:
    assert length_penalty(4, lenpen=1.0) == 4.0
    assert length_penalty(4, lenpen=0.0) == 1.0
    assert length_penalty(7, lenpen=0.5, kind="gnmt") == pytest.approx(math.sqrt(2.0))


# --- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    (dict(beam=0), "beam=0"),
    (dict(beam=-2), "beam=-2"),
    (dict(beam=24), "beam=24"),
    (dict(beam=2, n_best=3), "n_best=3"),
    (dict(lenpen_kind="wu"), "lenpen_kind='wu'"),
    (dict(stopping="early"), "stopping='early' is not allowed; choose one of finished, best"),
    (dict(max_len_a=0, max_len_b=0), "at least 1"),
    (dict(lenpen=1000.0), r"lenpen=1000.0 must be in \[-10, 10\]"),  # len ** 1000 overflowed: OverflowError
    (dict(lenpen=-1000.0), r"lenpen=-1000.0 must be in \[-10, 10\]"),  # len ** -1000 == 0: ZeroDivisionError
    (dict(lenpen=math.nan), r"lenpen=nan must be in"),
])
def test_beam_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        beam_search(random_model(0), padded_batch(0), **kwargs)


@pytest.mark.parametrize("search", [greedy, beam_search])
def test_empty_source_is_an_error(search: object) -> None:
    model, src = random_model(0), padded_batch(0)
    src[2] = PAD
    with pytest.raises(ValueError, match=r"empty source: sentence\(s\) \[2\]"):
        search(model, src)
    with pytest.raises(ValueError, match="empty source"):
        search(model, torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="batch, length"):
        search(model, src[0])
