"""A tiny encoder-decoder learns to reverse sequences of symbols, through the real training loop and
greedy decoding."""

import random

import torch

import tformer
from tformer.data import collate
from tformer.decoding import greedy
from tformer.training.config import TrainConfig
from tformer.training.loop import fit
from tformer.training.losses import label_smoothed_nll
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

PAD, BOS, EOS, FIRST, SYMBOLS = 0, 1, 2, 3, 10


def reversal_examples(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = [rng.randrange(FIRST, FIRST + SYMBOLS) for _ in range(rng.randint(3, 8))]
        out.append((src, src[::-1]))
    return out


class Reversal:
    def __init__(self, examples: list, batch_size: int) -> None:
        self.examples, self.batch_size = examples, batch_size

    def batches(self, epoch: int) -> list:
        order = list(range(len(self.examples)))
        random.Random(epoch).shuffle(order)
        chunks = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return [collate([self.examples[i] for i in c], pad_id=PAD, bos_id=BOS, eos_id=EOS) for c in chunks]

    def n_tokens(self, batch) -> int:  # noqa: ANN001
        return batch.n_target_tokens

    def loss(self, model, batch) -> torch.Tensor:  # noqa: ANN001
        loss, _ = label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, smoothing=0.0,
                                     ignore_index=PAD)
        return loss

    def evaluate(self, model) -> dict:  # noqa: ANN001
        return {}


def test_tiny_model_learns_to_reverse(tmp_path) -> None:  # noqa: ANN001
    config = tformer.preset("transformer-tiny", {
        "vocab_size": FIRST + SYMBOLS, "d_model": 64, "d_ff": 128, "n_heads": 4, "n_layers": 2,
        "max_len": 32, "dropout": {"embed": 0.0, "residual": 0.0}})
    model = tformer.build_model(config)
    train = TrainConfig(max_steps=1000, eval_every=10_000, log_every=50, label_smoothing=0.0,
                        optim=OptimConfig(name="adam", lr=2e-3, clip_norm=1.0),
                        schedule=ScheduleConfig(name="cosine", warmup=50, total_steps=1000))
    fit(model, config, Reversal(reversal_examples(4000, seed=0), 64), train, out_dir=tmp_path, progress=False)
    test = reversal_examples(200, seed=1)
    src = torch.zeros(len(test), 8, dtype=torch.long)
    for i, (s, _) in enumerate(test):
        src[i, : len(s)] = torch.tensor(s)
    out = greedy(model, src, max_len_a=1.0, max_len_b=2)
    accuracy = sum(o == t for o, (_, t) in zip(out, test, strict=True)) / len(test)
    print(f"exact-match accuracy {accuracy:.3f}")
    assert accuracy >= 0.95
