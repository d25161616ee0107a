"""`tformer train CONFIG.yaml|NAME [key=value ...] [--resume | --overwrite] [--no-progress] [--tensorboard]`: any
task's recipe. It prints the model's size and training FLOPs per token first; the progress bar shows on a
terminal (stderr) unless --no-progress, and without it each evaluation's metrics are printed as one line on
stdout (a batch job's log)."""

from __future__ import annotations

import argparse
import signal
import sys

from tformer.cli import shared

SHORTER = ("A shorter run: train.time_budget_min=2 (minutes of training steps and evaluations; the set-up before "
           "the first step, reading the data and building the tokenizer, is not counted), or train.max_steps=500; "
           "e.g. tformer train demo train.time_budget_min=2 out_dir=runs/quick. Every key of the recipe is "
           "an override: tformer recipes copy demo my.yaml shows them.")


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model from a YAML recipe", epilog=SHORTER)
    p.add_argument("config", help="YAML recipe file, or a shipped recipe's name (tformer recipes list), e.g. demo")
    p.add_argument("overrides", nargs="*", default=[],  # a default: optional, not in "the arguments are required"
                   help="key=value overrides, e.g. train.max_steps=100, before or after the options")
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--resume", action="store_true", help="continue from OUT_DIR/last exactly")
    runs.add_argument("--overwrite", action="store_true", help="replace the run already in OUT_DIR")
    shared.add_no_progress(p, what="no progress bar; print each evaluation's metrics as a line")
    p.add_argument("--tensorboard", action="store_true",
                   help="also log to OUT_DIR/tensorboard, as train.tensorboard=true (needs tformer[tb])")
    p.set_defaults(run=cmd_train, unknown_hint=shared.overrides_hint)


def cmd_train(args: argparse.Namespace) -> int:
    from tformer.runs import RunDir
    from tformer.tasks import load_recipe, resume_of, train
    from tformer.training.distributed import launched_world
    from tformer.training.loop import stop_summary

    overrides = args.overrides + (["train.tensorboard=true"] if args.tensorboard else [])
    recipe = load_recipe(args.config, overrides)
    resume = resume_of(args.config, overrides) if args.resume else False
    state = train(recipe, resume=resume, overwrite=args.overwrite, progress=shared.progress(args))
    if state.get("interrupted"):
        return report_interrupt(state, recipe.out_dir, "continue with --resume")
    if not launched_world().is_main:  # under torchrun, rank 0 reports
        return 0
    print(stop_summary(state))
    metrics = state.get("metrics", {})
    print(f"step {state['step']}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    run = RunDir(recipe.out_dir)
    saved = [f"{recipe.out_dir}/{path.name}" for path in (run.last, run.best) if path.is_dir()]
    print(f"checkpoints in {' and '.join(saved)}" if saved else "no checkpoint was written")
    return 0


def report_interrupt(state: dict, out_dir: str, how_to_continue: str) -> int:
    """A run a signal stopped: one line on stderr (what was saved, how to go on), exit code 128 + the signal."""
    print(f"tformer: {state['interrupted']} at step {state['step']}: saved {out_dir}/last; {how_to_continue}",
          file=sys.stderr)
    return 128 + signal.Signals[state["interrupted"]].value

