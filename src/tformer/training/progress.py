"""What a person follows while a model trains: the progress bar (the minutes of a time budget, or the
steps) on a terminal, a line now and then instead where there is none (a log, a pipe), and the tokens/s of
the training windows between logs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm


class Throughput:
    """Training tokens per second over a window: `add` the tokens of each step, read `rate` and `restart`
    at each log, and `restart` after an evaluation too, so that neither its time nor the tokens before it
    count (restarting only the clock would put the window's earlier tokens over the short time since)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.restart()

    def restart(self) -> None:
        self.tokens, self.start = 0, self.clock()

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def rate(self) -> float:
        return self.tokens / max(self.clock() - self.start, 1e-9)


class _BudgetBar(tqdm):
    """tqdm over seconds, shown as minutes:seconds (12:03/20:00) rather than a count of seconds."""

    @property
    def format_dict(self) -> dict[str, Any]:
        values = super().format_dict
        values.update(n_fmt=self.format_interval(values["n"]), total_fmt=self.format_interval(values["total"]))
        return values


LINE_EVERY_S = 30.0  # without a bar: a progress line after the first step, then at most this often


class ProgressBar:
    """The training loop's progress bar. With a time budget (train.time_budget_min) it fills with the time
    used of it (`12:03/20:00`, the step in the postfix): a run that stops on time would otherwise show
    max_steps and a wild ETA. Without one it counts steps of max_steps. Loss, lr and the last logged
    tokens/s follow. `state` is the loop's (step, elapsed seconds).

    With `lines` (no bar: stdout is a log or a pipe), the same news as one line on stdout after the first
    step and then every LINE_EVERY_S seconds, e.g. `step 120 (1.0 of 2.0 min): loss 5.432, lr 1.20e-04, 850
    tokens/s`, so that a batch job shows it is training between its evaluations."""

    def __init__(self, state: dict[str, Any], *, max_steps: int, budget_min: float | None, enabled: bool,
                 file: Any = None, lines: bool = False) -> None:
        self.max_steps, self.lines, self.line_at = max_steps, lines and not enabled, None
        self.budget = None if budget_min is None else 60.0 * budget_min
        if self.budget is None:
            self.bar = tqdm(total=max_steps, initial=state["step"], disable=not enabled, dynamic_ncols=True,
                            file=file)
        else:
            self.bar = _BudgetBar(total=self.budget, initial=min(state["elapsed"], self.budget),
                                  disable=not enabled, dynamic_ncols=True, file=file,
                                  bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}")
        self.tokens_per_s: float | None = None

    def show(self, state: dict[str, Any], *, loss: float, lr: float, tokens_per_s: float | None) -> None:
        """After each step: the step's loss and lr, and tokens/s when a window was just measured."""
        if tokens_per_s is not None:
            self.tokens_per_s = tokens_per_s
        postfix: dict[str, Any] = {} if self.budget is None else {"step": state["step"]}
        postfix.update(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
        if self.tokens_per_s is not None:
            postfix["tok_s"] = f"{self.tokens_per_s:.0f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1 if self.budget is None else min(state["elapsed"], self.budget) - self.bar.n)
        if self.lines and (self.line_at is None or time.monotonic() - self.line_at >= LINE_EVERY_S):
            self.line_at = time.monotonic()
            print(self.line(state, loss=loss, lr=lr), file=sys.stdout, flush=True)

    def line(self, state: dict[str, Any], *, loss: float, lr: float) -> str:
        """Where the run is, as one line: the step and the minutes (of the budget, or the steps of max_steps)."""
        minutes = state["elapsed"] / 60
        where = (f"step {state['step']} of {self.max_steps} ({minutes:.1f} min)" if self.budget is None
                 else f"step {state['step']} ({minutes:.1f} of {self.budget / 60:g} min)")
        rate = "" if self.tokens_per_s is None else f", {self.tokens_per_s:.0f} tokens/s"
        return f"{where}: loss {loss:.3f}, lr {lr:.2e}{rate}"

    def close(self) -> None:
        self.bar.close()


__all__ = ["LINE_EVERY_S", "ProgressBar", "Throughput"]
