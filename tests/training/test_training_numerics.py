"""The loop's numerics and bookkeeping on a tiny GPT: gradient accumulation over unequal micro-batches equals
one big batch (normalised by tokens, not by batches), non-finite steps are skipped and reported and stop
the run after train.max_bad_steps in a row, a changed model config cannot be resumed, keep_last keeps the
newest checkpoints, and a resumed log holds each step once. With a fake clock: a schedule fitted to a time
budget decays with the time, not the steps; the run says why it stopped; tokens/s does not jump after an
evaluation; the progress bar shows the budget's minutes."""

import io
import json
import math
import os
import signal
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.config import GPTConfig
from tformer.errors import UserError
from tformer.models.presets import build_model
from tformer.training import loop
from tformer.training.config import TrainConfig
from tformer.training.distributed import World
from tformer.training.loop import _step, fit, stop_summary
from tformer.training.optim import OptimConfig
from tformer.training.progress import ProgressBar, Throughput
from tformer.training.schedules import ScheduleConfig, fitted_lr

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


def next_token_loss(model: nn.Module, batch: Tensor) -> Tensor:
    """The cross entropy of each next token of padded rows (B, T), summed; padding left out."""
    logits = model(batch[:, :-1], valid=batch[:, :-1] != PAD)  # (B, T-1, V)
    return F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], ignore_index=PAD, reduction="sum")


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
        loss = next_token_loss(model, batch)
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


def test_a_step_reads_the_device_once(monkeypatch) -> None:  # noqa: ANN001
    """On a GPU each read of a device value makes the host wait for the device: the step reads its loss and
    gradient norm together, once, however many micro-batches it has."""
    model = build_model(config())
    task = TinyLM([3, 17, 5, 9, 2, 12], per_batch=2)
    reads = []
    for name in ("item", "tolist", "__float__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, _name=name):  # noqa: ANN001, ANN202
            caller = sys._getframe(1).f_globals.get("__name__")
            if caller == loop.__name__:
                reads.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, tokens, norm = _step(model, task, task.batches(0), optimizer, clip_norm=1.0, world=World())
    assert reads == ["tolist"]
    assert tokens == 42 and math.isfinite(loss) and loss > 0 and norm > 0


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
    with pytest.raises(UserError, match=r"stopping at step 2: 3 tries in a row had a non-finite loss or "
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


class ClockedLM(TinyLM):
    """TinyLM on a fake clock: each micro-batch takes 10 s and each evaluation 100 s; `signal_at` sends
    this process SIGINT during that micro-batch."""

    def __init__(self, *args, signal_at: int | None = None, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.evaluations, self.signal_at = 0, signal_at

    def now(self) -> float:
        return 10.0 * self.calls + 100.0 * self.evaluations

    def loss(self, model: nn.Module, batch: Tensor) -> Tensor:
        if self.calls + 1 == self.signal_at:
            os.kill(os.getpid(), signal.SIGINT)
        return super().loss(model, batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        self.evaluations += 1
        return super().evaluate(model)


def fake_clock(monkeypatch: pytest.MonkeyPatch, task: ClockedLM) -> None:
    class Time:
        perf_counter = staticmethod(task.now)

    monkeypatch.setattr(loop, "time", Time)


def test_a_schedule_fitted_to_the_time_budget_decays_with_time_not_steps(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    task = ClockedLM([6] * 4, per_batch=1)
    fake_clock(monkeypatch, task)
    model = build_model(config())
    schedule = ScheduleConfig(name="linear", warmup=2, min_ratio=0.1)  # total_steps null: to the end of training
    train = train_config(max_steps=1000, time_budget_min=1.0, eval_every=1000, schedule=schedule)
    state = fit(model, model.config, task, train, out_dir=tmp_path, progress=False)
    assert (state["step"], state["elapsed"], state["stopped"]) == (6, 60.0, "time budget")  # 6 steps of 10 s
    assert stop_summary(state) == "stopped at step 6 after 1.0 min: time budget reached"
    logged = [r["lr"] for r in records(tmp_path) if "lr" in r]
    # step k starts (k - 1) * 10 s into the 60 s budget; by steps alone (k / 1000) the lr would hardly fall
    progress = [max(k / 1000, (k - 1) / 6) for k in range(1, 7)]
    kw = dict(decay="linear", peak=1e-2, warmup=2, min_ratio=0.1)
    assert logged == pytest.approx([fitted_lr(k, p, **kw) for k, p in zip(range(1, 7), progress, strict=True)])
    assert logged[-1] == pytest.approx(1e-2 * (1 - 0.9 * 5 / 6))
    saved = torch.load(tmp_path / "last" / "trainer.pt", weights_only=False)["optimizer"]["param_groups"][0]["lr"]
    assert saved == pytest.approx(1e-3)  # the budget is used up: the floor, min_ratio * peak


def test_a_resumed_fitted_schedule_reads_the_restored_clock(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    schedule = ScheduleConfig(name="cosine", warmup=1, min_ratio=0.0)
    train = train_config(max_steps=1000, time_budget_min=2.0, eval_every=1000, schedule=schedule)
    task = ClockedLM([6] * 4, per_batch=1)
    fake_clock(monkeypatch, task)
    model = build_model(config())
    first = fit(model, model.config, task, train_config(**{**vars(train), "max_steps": 3}), out_dir=tmp_path,
                progress=False)
    assert (first["step"], first["elapsed"], first["stopped"]) == (3, 30.0, "max_steps")
    task = ClockedLM([6] * 4, per_batch=1)  # a new process: its clock starts again at 0
    fake_clock(monkeypatch, task)
    state = fit(model, model.config, task, train, out_dir=tmp_path, resume=True, progress=False)
    assert (state["step"], state["elapsed"], state["stopped"]) == (12, 120.0, "time budget")
    logged = {r["step"]: r["lr"] for r in records(tmp_path) if "lr" in r}
    # step 4 starts at 30 s (the restored elapsed time, not the new clock's 0): a quarter of the budget
    assert logged[4] == pytest.approx(fitted_lr(4, 0.25, decay="cosine", peak=1e-2, warmup=1, min_ratio=0.0))


def test_the_state_says_why_the_run_stopped(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    model = build_model(config())
    state = fit(model, model.config, TinyLM([5, 7], per_batch=1), train_config(max_steps=3), out_dir=tmp_path,
                progress=False)
    assert state["stopped"] == "max_steps" and "interrupted" not in state
    assert stop_summary(state).startswith("stopped at step 3 after ") and stop_summary(state).endswith(
        "min: max_steps reached")
    task = ClockedLM([5, 7], per_batch=1, signal_at=2)
    fake_clock(monkeypatch, task)
    state = fit(model, model.config, task, train_config(max_steps=9), out_dir=tmp_path / "stopped",
                progress=False)
    assert state["step"] == 2 and state["stopped"] == state["interrupted"] == "SIGINT"
    assert stop_summary(state) == "stopped at step 2 after 0.3 min: SIGINT received"


def test_tokens_per_s_does_not_jump_after_an_evaluation(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """An evaluation after every step, a log every 4th: each window holds only the step since the last
    evaluation, 10 s of training. (Resetting only the window's clock put 4 steps' tokens over 10 s.)"""
    task = ClockedLM([6] * 4, per_batch=1)
    fake_clock(monkeypatch, task)
    model = build_model(config())
    fit(model, model.config, task, train_config(max_steps=8, eval_every=1, log_every=4), out_dir=tmp_path,
        progress=False)
    rates = [r["tokens_per_s"] for r in records(tmp_path) if "tokens_per_s" in r]
    assert rates == pytest.approx([5 / 10, 5 / 10])  # 5 target tokens a step, 10 s a step


def test_the_throughput_window() -> None:
    now = [0.0]
    window = Throughput(lambda: now[0])
    window.add(300)
    now[0] = 3.0
    assert window.rate() == 100.0
    window.restart()  # as after an evaluation: neither its 3 s nor the tokens before count
    now[0] = 5.0
    window.add(100)
    assert window.rate() == 50.0


def test_the_progress_bar_shows_the_time_budget_or_the_steps() -> None:
    out = io.StringIO()
    bar = ProgressBar({"step": 0, "elapsed": 0.0}, max_steps=100_000, budget_min=20.0, enabled=True, file=out)
    bar.show({"step": 1234, "elapsed": 723.0}, loss=3.21, lr=4.1e-4, tokens_per_s=2900.0)
    text = str(bar.bar)
    assert "12:03/20:00" in text and "step=1234" in text and "loss=3.210" in text and "tok_s=2900" in text
    assert "100000" not in text
    bar.close()
    out = io.StringIO()
    bar = ProgressBar({"step": 10, "elapsed": 0.0}, max_steps=50, budget_min=None, enabled=True, file=out)
    bar.show({"step": 11, "elapsed": 1.0}, loss=2.0, lr=1e-3, tokens_per_s=None)
    assert "11/50" in str(bar.bar) and "step=" not in str(bar.bar)
    bar.close()
