"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one run (Vaswani et
al. 2017 average the last 5 or 20 checkpoints; fairseq's `average_checkpoints.py`, OpenNMT's `-avg`).

    average_states(states)                  the mean of state dicts of one model (float tensors averaged in
                                            float64, then cast back; integer buffers must agree)
    average_checkpoints(paths, out)         `tformer average CKPT... --out DIR`: same config and tokenizer
                                            checked, the averaged weights written as a checkpoint
    EvalAverages(out_dir, n)                `train.average_last: n`: the weights of the last n evaluations kept
                                            in out_dir/evals/, their mean written to out_dir/averaged/ after
                                            each evaluation (resumable: the files are the record)

Averaging smooths the noise of the last steps of SGD: points of one basin average to a point of lower loss
(Izmailov et al. 2018, SWA). It needs checkpoints of one run, late enough to share a basin.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from tformer.checkpoints import TOKENIZER_DIR, TRAINER_FILE, load_config, load_model, verify_source
from tformer.config import ModelConfig
from tformer.configio import to_dict
from tformer.errors import UserError
from tformer.files import write_atomic
from tformer.runs import RunDir
from tformer.training.checkpoint import SavesToDirectory, read_trainer, save_checkpoint


def average_states(states: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The element-wise mean of `states` (same keys and shapes), each tensor in its own dtype."""
    if not states:
        raise UserError("nothing to average: give at least one checkpoint")
    first = states[0]
    out: dict[str, Tensor] = {}
    for key, value in first.items():
        tensors = [s[key] for s in states]
        if value.is_floating_point():
            out[key] = (sum(t.double() for t in tensors) / len(tensors)).to(value.dtype)
        else:  # a step counter, an index buffer: the same in every checkpoint of one model
            if any(not torch.equal(t, value) for t in tensors[1:]):
                raise UserError(f"the checkpoints differ in {key}, which is not a weight and cannot be averaged")
            out[key] = value.clone()
    return out


class _TokenizerFiles:
    """A checkpoint's tokenizer directory, saved by copying its files (what save_checkpoint calls)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, target: Path) -> None:
        shutil.copytree(self.directory, target, dirs_exist_ok=True)


def _tokenizer_bytes(path: Path) -> dict[str, bytes]:
    directory = path / TOKENIZER_DIR
    if not directory.is_dir():
        return {}
    return {str(f.relative_to(directory)): f.read_bytes() for f in sorted(directory.rglob("*")) if f.is_file()}


def average_checkpoints(paths: Sequence[str | Path], out: str | Path) -> list[Path]:
    """Write to `out` a checkpoint whose weights are the mean of those at `paths` (at least two), which must
    hold the same model config and tokenizer; returns the paths averaged."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise UserError(f"average needs at least two checkpoints; got {len(paths)}")
    if len({p.resolve() for p in paths}) < len(paths):
        raise UserError("a checkpoint is given twice; each counts once in an average (give each once)")
    out = Path(out)
    if any(out.resolve() == p.resolve() for p in paths):
        raise UserError(f"--out {out} is one of the checkpoints averaged; write the average to a new directory")
    for p in paths:
        verify_source(p)  # an edited file is refused, not certified by the average's own manifest
    first_config = to_dict(load_config(paths[0])[0])
    first_tokenizer = _tokenizer_bytes(paths[0])
    for p in paths[1:]:
        if to_dict(load_config(p)[0]) != first_config:
            raise UserError(f"{p} holds another model config than {paths[0]}; only checkpoints of one model "
                            "(one run) can be averaged")
        if _tokenizer_bytes(p) != first_tokenizer:
            raise UserError(f"{p} holds another tokenizer than {paths[0]}; only checkpoints of one run can be "
                            "averaged")
    models = [load_model(p) for p in paths]
    model, config = models[0]
    refuse_same_weights(paths, [m.state_dict() for m, _ in models])
    state = average_states([m.state_dict() for m, _ in models])
    tokenizer = _TokenizerFiles(paths[0] / TOKENIZER_DIR) if first_tokenizer else None
    save_checkpoint(out, model=model, config=config, tokenizer=tokenizer, model_state=state)
    return paths


def refuse_same_weights(paths: Sequence[Path], states: Sequence[dict[str, Tensor]]) -> None:
    """A UserError if two of the checkpoints hold the same weights (`best` and `last` of a run whose best
    evaluation was its last: one step saved twice), which would count one step twice in the mean; the
    message names the step where the checkpoint records it."""
    for i, a in enumerate(states):
        for j in range(i + 1, len(states)):
            if all(torch.equal(a[k], states[j][k]) for k in a):
                trainer = paths[i] / TRAINER_FILE
                step = f", step {read_trainer(paths[i])['state']['step']}" if trainer.is_file() else ""
                raise UserError(f"{paths[i]} and {paths[j]} are the same checkpoint (the same weights{step}): an "
                                "average would count it twice (of these two alone, it is the checkpoint itself); give "
                                "checkpoints of other steps")


class EvalAverages:
    """`train.average_last`: after each evaluation, `add` keeps that evaluation's weights (out_dir/evals/
    step-NNNNNNNN.pt, the newest `n`) and writes their mean as the checkpoint out_dir/averaged/."""

    def __init__(self, out_dir: Path, n: int) -> None:
        self.out_dir, self.n = out_dir, n

    def add(self, step: int, state: dict[str, Tensor], *, model: nn.Module, config: ModelConfig,
            tokenizer: SavesToDirectory | None) -> list[int]:
        """Keep `state` (the weights at `step`), average the newest n kept; returns the steps averaged."""
        run = RunDir(self.out_dir)
        evals = run.evals
        buffer = io.BytesIO()
        torch.save({k: v.detach().cpu().clone() for k, v in state.items()}, buffer)
        write_atomic(evals / f"step-{step:08d}.pt", buffer.getvalue())
        kept = sorted(evals.glob("step-*.pt"))
        for old in kept[: -self.n]:
            old.unlink()
        kept = kept[-self.n :]
        states = [read_eval_weights(f) for f in kept]
        save_checkpoint(run.averaged, model=model, config=config, tokenizer=tokenizer,
                        model_state=average_states(states))
        return [int(f.stem.split("-")[1]) for f in kept]

    def check(self) -> None:
        """Read every kept evaluation's weights, as the next `add` will: a resumed run refuses a file it
        cannot read before it trains a step, not at its next evaluation."""
        for file in sorted(RunDir(self.out_dir).evals.glob("step-*.pt")):
            read_eval_weights(file)


def read_eval_weights(file: Path) -> dict[str, Tensor]:
    """The weights kept in evals/step-NNNNNNNN.pt; a file torch cannot read (truncated, edited) is refused in
    one line naming it and what to do."""
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's word for a truncated zip, a bad pickle
        reason = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{file} is corrupt ({reason}): delete it to resume, and train.average_last averages the "
                        "evaluations kept without it") from None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise UserError(f"{file} holds no weights ({type(state).__name__}): delete it to resume")
    return state


__all__ = ["EvalAverages", "average_checkpoints", "average_states", "read_eval_weights", "refuse_same_weights"]
