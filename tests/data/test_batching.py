"""Token-budget batching and collation: the budget holds, every example comes once an epoch, the order is a
pure function of (seed, epoch), and a resumed epoch continues with exactly the same batches."""

import random

import pytest
import torch
from torch.utils.data import DataLoader

from tformer.data import Batch, TokenBatchSampler, collate, limit_lengths
from tformer.data.batching import example_lengths

N = 1000
MAX_TOKENS = 256
Lengths = tuple[list[int], list[int]]


@pytest.fixture(scope="module")
def lengths() -> Lengths:
    rng = random.Random(0)
    src = [rng.randint(1, 60) for _ in range(N)]
    tgt = [max(1, s + rng.randint(-10, 10)) for s in src]
    return src, tgt


@pytest.fixture(scope="module")
def sampler(lengths: Lengths) -> TokenBatchSampler:
    return TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=1)


def test_budget_holds(sampler: TokenBatchSampler, lengths: Lengths) -> None:
    src, tgt = lengths
    batches = sampler.batches_for_epoch(0)
    for batch in batches:
        assert len(batch) * max(max(src[i], tgt[i]) for i in batch) <= MAX_TOKENS
    # Sorted packing wastes little: the padded budget is mostly filled.
    used = sum(max(src[i], tgt[i]) for b in batches for i in b)
    assert used > 0.8 * len(batches) * MAX_TOKENS


@pytest.mark.parametrize("epoch", [0, 1, 7])
def test_every_example_once(sampler: TokenBatchSampler, epoch: int) -> None:
    flat = [i for batch in sampler.batches_for_epoch(epoch) for i in batch]
    assert sorted(flat) == list(range(N))


def test_deterministic_per_seed_and_epoch(sampler: TokenBatchSampler, lengths: Lengths) -> None:
    fresh = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=1)
    assert fresh.batches_for_epoch(3) == sampler.batches_for_epoch(3)
    assert sampler.batches_for_epoch(0) != sampler.batches_for_epoch(1)
    other_seed = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=2)
    assert other_seed.batches_for_epoch(3) != sampler.batches_for_epoch(3)


def test_ties_broken_at_random_per_epoch() -> None:
    """Equal lengths: which examples share a batch changes with the epoch."""
    s = TokenBatchSampler([10] * 100, [10] * 100, max_tokens=100, seed=0)
    groups = [{frozenset(b) for b in s.batches_for_epoch(e)} for e in (0, 1)]
    assert all(len(b) == 10 for b in s.batches_for_epoch(0))
    assert groups[0] != groups[1]


def test_resume_mid_epoch(lengths: Lengths) -> None:
    first = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=1)
    first.set_epoch(2)
    full = list(first)
    assert len(first) == len(full)
    resumed = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=1)  # as after a restart
    resumed.set_epoch(2, start=5)
    assert list(resumed) == full[5:]
    assert len(resumed) == len(full) - 5


def test_no_shuffle_is_sorted(lengths: Lengths) -> None:
    s = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, shuffle=False)
    sizes = [max(lengths[0][i], lengths[1][i]) for b in s.batches_for_epoch(0) for i in b]
    assert sizes == sorted(sizes)
    assert s.batches_for_epoch(0) == s.batches_for_epoch(5)


def test_curriculum_goes_from_short_to_long_then_shuffles(lengths: Lengths) -> None:
    s = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=3, curriculum_epochs=1)
    plain = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, seed=3)
    sizes = [max(lengths[0][i], lengths[1][i]) for i in range(N)]

    def longest(batches: list[list[int]]) -> list[int]:
        return [max(sizes[i] for i in b) for b in batches]

    first, later = longest(s.batches_for_epoch(0)), longest(s.batches_for_epoch(1))
    quarter = len(first) // 4
    assert sum(first[:quarter]) * 2 < sum(first[-quarter:])  # the first quarter holds the short sentences
    assert sorted(first) == sorted(longest(plain.batches_for_epoch(0)))  # the same batches, reordered
    assert first != sorted(first)  # noisy, not strictly sorted
    assert s.batches_for_epoch(1) == plain.batches_for_epoch(1)  # after the curriculum: as without it
    assert abs(sum(later[:quarter]) - sum(later[-quarter:])) < 0.3 * sum(later[:quarter])
    with pytest.raises(ValueError, match="curriculum_epochs=-1 must be >= 0"):
        TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, curriculum_epochs=-1)


def test_max_examples(lengths: Lengths) -> None:
    s = TokenBatchSampler(*lengths, max_tokens=MAX_TOKENS, max_examples=8, seed=0)
    assert max(len(b) for b in s.batches_for_epoch(0)) == 8


def test_too_long_example_is_an_error() -> None:
    with pytest.raises(ValueError, match="example 1 is 300 tokens long, more than max_tokens=256"):
        TokenBatchSampler([5, 300, 5], [5, 5, 5], max_tokens=256)
    with pytest.raises(ValueError, match="3 source lengths but 2 target lengths"):
        TokenBatchSampler([1, 2, 3], [1, 2], max_tokens=256)


def test_limit_lengths() -> None:
    examples = [([1] * 5, [2] * 3), ([1] * 9, [2] * 3), ([1] * 3, [2] * 8), ([1] * 8, [2] * 7)]
    kept, n = limit_lengths(examples, max_len=8, overflow="drop")
    assert (kept, n) == ([examples[0], examples[3]], 2)  # target 8 + <s> is 9 > 8
    cut, n = limit_lengths(examples, max_len=8, overflow="truncate")
    assert n == 2 and len(cut) == 4
    assert all(len(s) <= 8 and len(t) + 1 <= 8 for s, t in cut)
    assert cut[1] == ([1] * 8, [2] * 3) and cut[2] == ([1] * 3, [2] * 7)
    with pytest.raises(ValueError, match="overflow='keep' is not allowed"):
        limit_lengths(examples, max_len=8, overflow="keep")


def test_collate() -> None:
    batch = collate([([5, 6, 7], [8, 9]), ([10], [11, 12, 13])], pad_id=0, bos_id=1, eos_id=2)
    assert torch.equal(batch.src, torch.tensor([[5, 6, 7], [10, 0, 0]]))
    assert torch.equal(batch.tgt_in, torch.tensor([[1, 8, 9, 0], [1, 11, 12, 13]]))
    assert torch.equal(batch.tgt_out, torch.tensor([[8, 9, 2, 0], [11, 12, 13, 2]]))
    assert batch.src.dtype == torch.long and len(batch) == 2
    assert batch.n_target_tokens == 7 == int((batch.tgt_out != 0).sum())
    # Teacher forcing: tgt_in shifted left by one is tgt_out, wherever tgt_in is not padding.
    real = batch.tgt_in[:, 1:] != 0
    assert torch.equal(batch.tgt_in[:, 1:][real], batch.tgt_out[:, :-1][real])


def test_with_dataloader() -> None:
    rng = random.Random(0)
    examples = [([rng.randint(4, 99) for _ in range(rng.randint(1, 30))],
                 [rng.randint(4, 99) for _ in range(rng.randint(1, 30))]) for _ in range(200)]
    sampler = TokenBatchSampler.for_examples(examples, max_tokens=128, seed=0)
    assert example_lengths(examples)[1][0] == len(examples[0][1]) + 1
    loader = DataLoader(examples, batch_sampler=sampler, collate_fn=collate)
    seen = 0
    for batch in loader:
        assert isinstance(batch, Batch)
        assert batch.src.numel() <= 128 and batch.tgt_in.numel() <= 128  # the budget holds for the tensors
        seen += len(batch)
    assert seen == len(examples)
