"""Checkpoint averaging (`tformer average`, train.average_last) and early stopping (train.patience), issue 32."""

from __future__ import annotations

import shutil

import pytest
import torch
from test_training_numerics import TinyLM, config, records, train_config

from tformer.checkpoints import load_model
from tformer.cli import main
from tformer.errors import UserError
from tformer.models.presets import build_model
from tformer.training.average import average_checkpoints, average_states, read_eval_weights
from tformer.training.checkpoint import save_checkpoint
from tformer.training.loop import fit, stop_summary


class Scripted(TinyLM):
    """TinyLM whose evaluations report the given valid losses, in turn."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__([5, 7, 4, 6], per_batch=1)
        self.losses = list(losses)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {"valid_loss": self.losses.pop(0)}


def test_patience_stops_after_n_evaluations_without_a_better_metric(tmp_path) -> None:  # noqa: ANN001
    model = build_model(config())
    task = Scripted([3.0, 2.0, 2.5, 2.1, 2.2, 1.0])
    state = fit(model, model.config, task, train_config(max_steps=12, eval_every=2, patience=3),
                out_dir=tmp_path, progress=False)
    assert state["step"] == 10 and state["stopped"] == "patience" and state["best"] == 2.0
    assert stop_summary(state).endswith("min: patience reached (3 evaluations without a better valid_loss)")
    assert [r["step"] for r in records(tmp_path) if "eval/valid_loss" in r] == [2, 4, 6, 8, 10]


def test_patience_resumes_with_its_count(tmp_path) -> None:  # noqa: ANN001
    model = build_model(config())
    fit(model, model.config, Scripted([3.0, 2.0, 2.5]), train_config(max_steps=6, eval_every=2, patience=3),
        out_dir=tmp_path, progress=False)  # one evaluation without improvement so far
    resumed = build_model(config())
    state = fit(resumed, resumed.config, Scripted([2.6, 2.7, 0.5]),
                train_config(max_steps=20, eval_every=2, patience=3), out_dir=tmp_path, resume=True, progress=False)
    assert (state["step"], state["stopped"]) == (10, "patience")  # 6, then 8 and 10: three without a better one


def test_average_states_is_the_mean_in_each_dtype() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([1.0], dtype=torch.bfloat16), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 5.0]), "h": torch.tensor([2.0], dtype=torch.bfloat16), "n": torch.tensor(3)}
    out = average_states([a, b])
    assert out["w"].tolist() == [2.0, 3.5] and out["h"].dtype == torch.bfloat16 and out["n"].item() == 3
    with pytest.raises(UserError, match="differ in n"):
        average_states([a, {**b, "n": torch.tensor(4)}])


def checkpoints(tmp_path, n: int) -> list:  # noqa: ANN001
    paths = []
    for seed in range(n):
        torch.manual_seed(seed)
        model = build_model(config(tie_embeddings=True))
        save_checkpoint(tmp_path / f"c{seed}", model=model, config=model.config)
        paths.append(tmp_path / f"c{seed}")
    return paths


def test_average_checkpoints_equals_the_mean_of_the_weights_and_loads(tmp_path) -> None:  # noqa: ANN001
    paths = checkpoints(tmp_path, 3)
    assert main(["average", *map(str, paths), "--out", str(tmp_path / "avg")]) == 0
    averaged, _ = load_model(tmp_path / "avg")
    states = [load_model(p)[0].state_dict() for p in paths]
    for key, value in averaged.state_dict().items():
        torch.testing.assert_close(value, sum(s[key] for s in states) / 3, rtol=0, atol=1e-7)
    tied = [p for p in averaged.parameters()]
    assert len(tied) == len({id(p) for p in tied})  # tied weights come back as one tensor
    assert averaged(torch.tensor([[1, 2, 3]])).isfinite().all()


def test_average_refuses_checkpoints_of_other_models(tmp_path, capsys) -> None:  # noqa: ANN001
    paths = checkpoints(tmp_path, 2)
    other = build_model(config(d_ff=64))
    save_checkpoint(tmp_path / "other", model=other, config=other.config)
    assert main(["average", str(paths[0]), str(tmp_path / "other"), "--out", str(tmp_path / "avg")]) == 2
    assert "holds another model config" in capsys.readouterr().err and not (tmp_path / "avg").exists()
    with pytest.raises(UserError, match="at least two"):
        average_checkpoints(paths[:1], tmp_path / "avg")
    with pytest.raises(UserError, match="given twice"):
        average_checkpoints([paths[0], paths[0]], tmp_path / "avg")


def test_average_refuses_two_checkpoints_of_one_step(tmp_path) -> None:  # noqa: ANN001
    """Two directories holding the same weights (a run's best and last after a last evaluation that was its
    best) are one checkpoint: refused, whatever else is averaged with them."""
    paths = checkpoints(tmp_path, 2)
    shutil.copytree(paths[0], tmp_path / "again")
    with pytest.raises(UserError, match=r"c0 and .*again are the same checkpoint \(the same weights\): an average "
                                        r"would count it twice"):
        average_checkpoints([paths[0], paths[1], tmp_path / "again"], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_average_last_keeps_the_mean_of_the_last_evaluations_and_resumes(tmp_path) -> None:  # noqa: ANN001
    model = build_model(config())
    task = Scripted([3.0, 2.0, 1.0, 0.5, 0.4, 0.3])
    fit(model, model.config, task, train_config(max_steps=6, eval_every=2, average_last=2), out_dir=tmp_path,
        progress=False)
    assert sorted(p.name for p in (tmp_path / "evals").iterdir()) == ["step-00000004.pt", "step-00000006.pt"]
    kept = [torch.load(tmp_path / "evals" / f"step-0000000{s}.pt", weights_only=True) for s in (4, 6)]
    averaged, _ = load_model(tmp_path / "averaged")
    last, _ = load_model(tmp_path / "last")
    for key, value in averaged.state_dict().items():
        torch.testing.assert_close(value, (kept[0][key] + kept[1][key]) / 2, rtol=0, atol=1e-7)
        assert torch.equal(last.state_dict()[key], kept[1][key])  # the newest kept is `last`'s weights
    fit(model, model.config, task, train_config(max_steps=8, eval_every=2, average_last=2), out_dir=tmp_path,
        resume=True, progress=False)
    assert sorted(p.name for p in (tmp_path / "evals").iterdir()) == ["step-00000006.pt", "step-00000008.pt"]


@pytest.mark.parametrize("key", ["patience", "average_last"])
def test_bad_values_are_refused(key: str) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UserError, match=f"train.{key}={bad!r} must be a positive integer or null"):
            train_config(**{key: bad})


def test_a_resumed_run_reads_its_kept_evaluations_before_it_trains(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A kept evaluation that cannot be read (truncated) is refused when a resumed run starts, naming the
    file, not at its next evaluation after training the steps since; no step is trained, no record logged."""
    model = build_model(config())
    fit(model, model.config, Scripted([3.0, 2.0]), train_config(max_steps=2, eval_every=2, average_last=2),
        out_dir=tmp_path, progress=False)
    kept = tmp_path / "evals" / "step-00000002.pt"
    kept.write_bytes(kept.read_bytes()[:100])
    log = (tmp_path / "metrics.jsonl").read_bytes()

    def no_training(self: Scripted, epoch: int) -> list:
        raise AssertionError("a step was trained before the kept evaluations were read")

    monkeypatch.setattr(Scripted, "batches", no_training)
    with pytest.raises(UserError) as e:
        fit(model, model.config, Scripted([1.0]), train_config(max_steps=4, eval_every=2, average_last=2),
            out_dir=tmp_path, resume=True, progress=False)
    assert str(e.value).startswith(f"{kept} is corrupt (")
    assert "delete it to resume" in str(e.value)
    assert (tmp_path / "metrics.jsonl").read_bytes() == log
    with pytest.raises(UserError, match="holds no weights"):
        torch.save([1, 2], kept)
        read_eval_weights(kept)
