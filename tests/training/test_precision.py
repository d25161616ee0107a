"""Mixed precision and compiled training through the loop, on the CPU: bf16 autocast trains a tiny GPT to
within 5% of fp32 and resumes bitwise; fp16's loss scaler retries an overflow without counting it as a bad
step, stops a run whose gradient overflows at every scale, and its scale survives a resume (fp16 is refused
on the CPU, so these tests allow it there); the settings a device cannot run are refused in one line; and
train.compile gives the eager run's losses, saves keys without `_orig_mod.`, resumes bitwise and compiles the
loss in one graph with the model.

The compiled test pays torch.compile's C++ build once per machine (inductor caches it under
/tmp/torchinductor_$USER): 26 s with a cold cache on the 2-core machine, about 4 s after."""

import math
from pathlib import Path

import pytest
import safetensors
import torch
from torch import Tensor, nn

from tests.training.test_training_numerics import TinyLM, config, next_token_loss, records, train_config
from tformer.errors import UserError
from tformer.models.presets import build_model
from tformer.training import precision
from tformer.training.checkpoint import load_training_state, read_trainer, save_checkpoint
from tformer.training.config import TrainConfig
from tformer.training.distributed import World
from tformer.training.loop import _loss_of, fit, varying_dims
from tformer.training.precision import Precision, resolve_precision, tf32_matmuls


class LoudLM(TinyLM):
    """TinyLM with its loss multiplied by `factor`: gradients that large overflow float16 once scaled."""

    def __init__(self, *args, factor: float, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.factor = factor

    def loss(self, model: nn.Module, batch: Tensor) -> Tensor:
        return super().loss(model, batch) * self.factor


@pytest.fixture
def fp16_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let fp16 run on the CPU (torch's CPU autocast has float16, slowly): the scaler's path, tested here."""
    monkeypatch.setattr(precision, "FP16_DEVICES", ("cuda", "cpu"))


def train(out_dir: Path, task: TinyLM, *, resume: bool = False, **overrides) -> nn.Module:  # noqa: ANN003
    torch.manual_seed(0)
    model = build_model(config())
    fit(model, model.config, task, train_config(**overrides), out_dir=out_dir, progress=False, resume=resume)
    return model


def losses(out_dir: Path) -> list[float]:
    return [r["loss"] for r in records(out_dir) if "loss" in r]


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_bf16_trains_to_within_five_percent_of_fp32(tmp_path: Path) -> None:
    curves = {}
    for name in ("fp32", "bf16"):
        train(tmp_path / name, TinyLM([9] * 16, per_batch=4), max_steps=40, precision=name)
        curves[name] = losses(tmp_path / name)
    assert curves["bf16"][0] == pytest.approx(curves["fp32"][0], rel=1e-2)  # the same start, rounded
    assert curves["fp32"][-1] < 0.7 * curves["fp32"][0]  # it learned something
    assert curves["bf16"][-1] == pytest.approx(curves["fp32"][-1], rel=0.05)
    assert curves["bf16"] != curves["fp32"]  # autocast did run


def test_bf16_resumes_bitwise(tmp_path: Path) -> None:
    lengths = [5, 7, 4, 6, 9, 3]
    whole = train(tmp_path / "whole", TinyLM(lengths, per_batch=2), max_steps=6, precision="bf16")
    train(tmp_path / "cut", TinyLM(lengths, per_batch=2), max_steps=3, precision="bf16")
    resumed = train(tmp_path / "cut", TinyLM(lengths, per_batch=2), resume=True, max_steps=6, precision="bf16")
    assert same_weights(whole, resumed)
    assert losses(tmp_path / "whole") == losses(tmp_path / "cut")


def test_fp16_overflows_are_retried_not_counted_and_the_scale_resumes(tmp_path: Path, fp16_on_cpu: None) -> None:
    def task() -> LoudLM:  # overflows at the initial scale 2**16, fits a few halvings lower
        return LoudLM([9] * 8, per_batch=2, factor=1000.0)

    # max_bad_steps=1: a single counted bad step would stop the run
    whole = train(tmp_path / "whole", task(), max_steps=6, precision="fp16", max_bad_steps=1)
    logged = records(tmp_path / "whole")
    retried = [r for r in logged if "skipped" in r]
    assert retried and all(r["skipped"].startswith("fp16 gradient overflow at loss scale ") for r in retried)
    assert [r["step"] for r in logged if "loss" in r] == [1, 2, 3, 4, 5, 6]
    scales = [r["loss_scale"] for r in logged if "loss" in r]
    assert scales[0] < 2.0**16 and all(math.isfinite(x) for x in scales)
    saved = read_trainer(tmp_path / "whole" / "last")["scaler"]
    assert saved["scale"] == scales[-1]  # no overflow in the last step: the scale it used is kept

    train(tmp_path / "cut", task(), max_steps=3, precision="fp16", max_bad_steps=1)
    resumed = train(tmp_path / "cut", task(), resume=True, max_steps=6, precision="fp16", max_bad_steps=1)
    assert same_weights(whole, resumed)
    def steps(out_dir: Path) -> list[tuple]:  # training records (the cut run also evaluated at step 3)
        return [(r["step"], r.get("skipped"), r.get("loss"), r.get("loss_scale")) for r in records(out_dir)
                if "loss" in r or "skipped" in r]

    assert steps(tmp_path / "cut") == steps(tmp_path / "whole")  # the same retries, losses and scales


def test_fp16_overflow_at_every_scale_stops_the_run(tmp_path: Path, fp16_on_cpu: None) -> None:
    task = LoudLM([9] * 8, per_batch=2, factor=1e30)  # finite loss, a gradient too large for any scale >= 1
    with pytest.raises(UserError, match=r"2 tries in a row had a non-finite loss or gradient"):
        train(tmp_path, task, max_steps=6, precision="fp16", max_bad_steps=2)
    retried = [r for r in records(tmp_path) if "fp16 gradient overflow" in r.get("skipped", "")]
    assert len(retried) == 17  # 2**16 down to 2**0 = MIN_SCALE; then 0.5 and 0.25 are bad steps


def test_the_scaler_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    model = build_model(config())
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": 3})
    save_checkpoint(tmp_path / "c", model=model, config=model.config, state={"step": 1}, scaler=scaler)
    fresh = torch.amp.GradScaler("cpu", growth_interval=7)
    load_training_state(tmp_path / "c", scaler=fresh)
    assert fresh.state_dict() == scaler.state_dict()
    off = torch.amp.GradScaler("cpu", enabled=False)  # fp32 or bf16: nothing saved, nothing restored
    save_checkpoint(tmp_path / "d", model=model, config=model.config, state={"step": 1}, scaler=off)
    assert read_trainer(tmp_path / "d")["scaler"] is None
    load_training_state(tmp_path / "d", scaler=fresh)  # a checkpoint without a scale keeps the scaler's own
    assert fresh.get_scale() == 1024.0


def test_auto_is_bf16_on_a_gpu_that_has_it_else_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = torch.device("cuda", 0)
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_precision("auto", cuda) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_precision("auto", cuda) == "fp32"
    assert resolve_precision("fp16", cuda) == "fp16"
    assert Precision("fp32", torch.device("cpu")).scale() == 1.0


REFUSED = [  # (precision, device, fsdp, the message)
    pytest.param("fp16", "cpu", False, "train.precision='fp16' needs a CUDA GPU; this run trains on cpu: use bf16 "
                 "(or fp32, or auto)", id="fp16-cpu"),
    pytest.param("bf16", "cuda", False, "train.precision='bf16' but Tesla T4 has no bfloat16 support; use fp16 or "
                 "fp32 (or auto)", id="bf16-gpu-without-it"),
    pytest.param("fp16", "cuda", True, "train.precision='fp16' cannot train with train.distributed='fsdp' (the loss "
                 "scaler would see one shard of the gradients); use bf16 or fp32, or ddp", id="fp16-fsdp"),
    pytest.param("fp8", "cpu", False, "train.precision='fp8' is not allowed; choose one of auto, fp32, bf16, fp16",
                 id="unknown"),
]


@pytest.mark.parametrize(("name", "device", "fsdp", "message"), REFUSED)
def test_what_the_device_cannot_run_is_refused(monkeypatch: pytest.MonkeyPatch, name: str, device: str, fsdp: bool,
                                              message: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(UserError) as caught:
        resolve_precision(name, torch.device(device), fsdp=fsdp)
    assert str(caught.value) == message


def test_fp16_on_the_cpu_is_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^train.precision='fp16' needs a CUDA GPU; this run trains on cpu"):
        train(tmp_path, TinyLM([5, 7], per_batch=1), precision="fp16", device="cpu")
    assert not any(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.parametrize(("key", "value", "message"), [
    pytest.param("precision", "half", "train.precision='half' is not allowed; choose one of auto, fp32, bf16, fp16",
                 id="precision"),
    pytest.param("compile", "yes", "train.compile='yes' must be true or false", id="compile"),
])
def test_bad_settings_are_refused(key: str, value: str, message: str) -> None:
    with pytest.raises(UserError) as caught:
        TrainConfig(**{key: value})
    assert str(caught.value) == message


def test_tf32_is_set_on_a_gpu_only_and_restored() -> None:
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with tf32_matmuls(torch.device("cpu")):
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    with tf32_matmuls(torch.device("cuda", 0)):  # flags only: nothing runs on the GPU
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


class PureLM(TinyLM):
    """TinyLM without its call counter: a loss with no Python side effects, as the real tasks' are."""

    def loss(self, model: nn.Module, batch: Tensor) -> Tensor:
        return next_token_loss(model, batch)


def test_compiled_training_matches_eager_saves_plain_keys_and_resumes_bitwise(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    lengths = [6] * 8  # one shape: one compilation
    train(tmp_path / "eager", PureLM(lengths, per_batch=2), max_steps=4, precision="fp32")
    assert "compiles" not in capsys.readouterr().err
    compiled = train(tmp_path / "whole", PureLM(lengths, per_batch=2), max_steps=4, precision="fp32", compile=True)
    assert "tformer: train.compile: the first step compiles the model and its loss" in capsys.readouterr().err
    # the losses, not the weights: Adam scales the rounding noise of a gradient that is ~0 (k_proj's bias:
    # softmax ignores a shift shared by all keys) up to lr-sized steps, different in each
    assert losses(tmp_path / "whole") == pytest.approx(losses(tmp_path / "eager"), rel=1e-5)
    with safetensors.safe_open(tmp_path / "whole" / "last" / "model.safetensors", "pt") as f:
        assert not [k for k in f.keys() if "_orig_mod" in k]
    train(tmp_path / "cut", PureLM(lengths, per_batch=2), max_steps=2, precision="fp32", compile=True)
    resumed = train(tmp_path / "cut", PureLM(lengths, per_batch=2), resume=True, max_steps=4, precision="fp32",
                    compile=True)
    assert same_weights(compiled, resumed)


def test_compile_takes_the_loss_into_the_model_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    graphs = []

    def keep(graph: torch.fx.GraphModule, inputs: list[Tensor]) -> object:
        graphs.append(graph)
        return graph.forward  # run the captured graph as it is: no inductor

    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile(fn, backend=keep, **kw))
    torch.manual_seed(0)
    model, task = build_model(config()), PureLM([6] * 4, per_batch=2)
    batch = task.batches(0)[0]
    compiled = _loss_of(task, model, True, World())(batch)
    assert compiled.item() == pytest.approx(task.loss(model, batch).item(), rel=1e-6)
    assert len(graphs) == 1  # one graph: no break between the model and its loss
    targets = " ".join(str(node.target) for node in graphs[0].graph.nodes)
    assert "cross_entropy" in targets and "linear" in targets, targets
    eager = _loss_of(task, model, False, World())
    assert eager(batch).item() == pytest.approx(compiled.item(), rel=1e-6) and len(graphs) == 1  # not compiled


def test_batches_of_many_shapes_compile_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Translation batches differ in size and length: the dims that differ over the epoch are dynamic from
    the first step, so one compilation serves them all (torch alone would compile twice)."""
    graphs = []

    def keep(graph: torch.fx.GraphModule, inputs: list[Tensor]) -> object:
        graphs.append(graph)
        return graph.forward

    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile(fn, backend=keep, **kw))
    torch.manual_seed(0)
    model, task = build_model(config()), PureLM([3, 9, 5, 12, 7, 4, 10, 6], per_batch=2)
    batches = task.batches(0)
    assert len({b.shape for b in batches}) == 4 and varying_dims(batches) == [[1]]  # (2, T): T varies
    loss = _loss_of(task, model, True, World(), batches=batches)
    for batch in batches:
        assert loss(batch).item() == pytest.approx(task.loss(model, batch).item(), rel=1e-5)
    assert len(graphs) == 1
    same = PureLM([6] * 4, per_batch=2).batches(0)
    assert varying_dims(same) == [[]] and varying_dims([]) == []
