"""The loop's numerics and bookkeeping on a tiny GPT: gradient accumulation over unequal micro-batches equals
one big batch (normalised by tokens, not by batches), non-finite steps are skipped and reported and stop
the run after train.max_bad_steps in a row, a changed model config cannot be resumed, keep_last keeps the
newest checkpoints, and a resumed log holds each step once."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.config import GPTConfig
from tformer.models.presets import build_model
from tformer.training.distributed import World
from tformer.training.loop import TrainConfig, _step, fit
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

PAD = 0


def config(**overrides) -> GPTConfig:
    base = dict(vocab_size=32, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=32, pad_id=PAD,
                dropout={"embed": 0.0, "residual": 0.0})
    return GPTConfig(**{**base, **overrides})


def padded(rows: list[list[int]]) -> Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD)  # (B, T)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


class TinyLM:
    """Next-token prediction on fixed random sequences of unequal lengths, padded per micro-batch."""

    def __init__(self, lengths: list[int], per_batch: int, *, nan_calls: set[int] = frozenset()) -> None:
        g = torch.Generator().manual_seed(0)
        self.rows = [torch.randint(1, 32, (n,), generator=g).tolist() for n in lengths]
        self.per_batch, self.calls, self.nan_calls = per_batch, 0, nan_calls

    def batches(self, epoch: int) -> list[Tensor]:
        return [padded(self.rows[i : i + self.per_batch]) for i in range(0, len(self.rows), self.per_batch)]

    def n_tokens(self, batch: Tensor) -> int:
        return int((batch[:, 1:] != PAD).sum())

    def loss(self, model: nn.Module, batch: Tensor) -> Tensor:
        self.calls += 1
        logits = model(batch[:, :-1], valid=batch[:, :-1] != PAD)  # (B, T-1, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], ignore_index=PAD, reduction="sum")
        return loss * math.nan if self.calls in self.nan_calls else loss

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"valid_loss": 1.0}


def grads(model: nn.Module) -> dict[str, Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_accumulation_over_unequal_micro_batches_equals_one_big_batch() -> None:
    torch.manual_seed(0)
    model = build_model(config())
    lengths = [3, 17, 5, 9, 2, 12]  # micro-batches of 2 rows: padded to 17, 9 and 12
    task = TinyLM(lengths, per_batch=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the step leaves the weights alone
    micro = task.batches(0)
    loss_micro, tokens, _ = _step(model, task, micro, optimizer, clip_norm=None, world=World())
    accumulated = grads(model)
    whole = padded(task.rows)
    loss_whole, tokens_whole, _ = _step(model, task, [whole], optimizer, clip_norm=None, world=World())
    assert tokens == tokens_whole == sum(n - 1 for n in lengths)
    assert loss_micro == pytest.approx(loss_whole, rel=1e-6)
    for name, g in grads(model).items():
        torch.testing.assert_close(accumulated[name], g, rtol=1e-6, atol=1e-6, msg=name)
    # the bug this guards against: averaging each micro-batch's mean gives a visibly different gradient
    model.zero_grad()
    for batch in micro:
        (task.loss(model, batch) / task.n_tokens(batch) / len(micro)).backward()
    naive = grads(model)
    assert max((naive[n] - accumulated[n]).abs().max().item() for n in naive) > 1e-4


def train_config(**overrides) -> TrainConfig:
    base = dict(max_steps=6, eval_every=100, log_every=1, label_smoothing=0.0, optim=OptimConfig(lr=1e-2),
                schedule=ScheduleConfig(name="constant", warmup=1))
    return TrainConfig(**{**base, **overrides})


def records(out_dir) -> list[dict]:  # noqa: ANN001
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_non_finite_loss_skips_the_step_and_says_so(tmp_path, capsys) -> None:  # noqa: ANN001
    model = build_model(config())
    task = TinyLM([5, 7, 4, 6], per_batch=1, nan_calls={3})  # the 3rd micro-batch's loss is NaN
    state = fit(model, model.config, task, train_config(), out_dir=tmp_path, progress=False)
    assert state["step"] == 6  # six real updates: the bad step does not count
    assert all(torch.isfinite(p).all() for p in model.parameters())
    logged = records(tmp_path)
    assert {"step": 3, "skipped": "loss nan"} in logged
    assert [r["step"] for r in logged if "loss" in r] == [1, 2, 3, 4, 5, 6]
    assert "step 3 skipped: non-finite loss nan" in capsys.readouterr().err


def test_too_many_bad_steps_in_a_row_stop_the_run(tmp_path) -> None:  # noqa: ANN001
    model = build_model(config())
    task = TinyLM([5, 7, 4, 6], per_batch=1, nan_calls={2, 3, 4})
    with pytest.raises(RuntimeError, match=r"stopping at step 2: 3 tries in a row had a non-finite loss or "
                                           r"gradient \(train.max_bad_steps=3\)"):
        fit(model, model.config, task, train_config(max_bad_steps=3), out_dir=tmp_path, progress=False)


def test_resume_refuses_a_changed_model_config(tmp_path) -> None:  # noqa: ANN001
    model = build_model(config())
    fit(model, model.config, TinyLM([5, 7], per_batch=1), train_config(max_steps=2), out_dir=tmp_path,
        progress=False)
    other = build_model(config(d_ff=64))
    with pytest.raises(ValueError, match=r"cannot resume .*last: model d_ff is 32 in the checkpoint but 64 in "
                                         r"the recipe"):
        fit(other, other.config, TinyLM([5, 7], per_batch=1), train_config(max_steps=4), out_dir=tmp_path,
            resume=True, progress=False)
    with pytest.raises(ValueError, match=r"cannot resume: no checkpoint at .*nowhere/last"):
        fit(other, other.config, TinyLM([5, 7], per_batch=1), train_config(), out_dir=tmp_path / "nowhere",
            resume=True, progress=False)


def test_keep_last_keeps_the_newest_checkpoints_and_a_resumed_log_has_each_step_once(tmp_path) -> None:  # noqa: ANN001
    model = build_model(config())
    task = TinyLM([5, 7, 4, 6], per_batch=1)
    fit(model, model.config, task, train_config(save_every=1, keep_last=3), out_dir=tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000004", "step-00000005"]
    with open(tmp_path / "metrics.jsonl", "a") as f:  # as if a crash came after logging step 7
        f.write(json.dumps({"step": 7, "loss": 1.0}) + "\n" + '{"step": 8, "lo')
    fit(model, model.config, task, train_config(max_steps=8, save_every=1), out_dir=tmp_path, resume=True,
        progress=False)
    assert [r["step"] for r in records(tmp_path) if "loss" in r] == list(range(1, 9))
