"""A live progress bar for training runs; silent when output is not a terminal.

    actor steps ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 12000/50000  1510 steps/s
    episode    87.0  eval   143.5  0:00:25

Actor steps out of `max_actor_steps`, steps per second, the latest episode and
evaluation returns, and the time left. Log lines printed through rich's console (the
terminal logger) scroll above the bar. When output is redirected (a file, a pipe, a
multirun job under joblib) nothing is drawn.
"""

from __future__ import annotations

import time
from typing import Any

import rich
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class ProgressDisplay:
    """Actor steps out of the budget, steps/s, ETA and the latest returns."""

    def __init__(self, total_steps: int, enabled: bool = True, refresh_every: int = 200):
        console = rich.get_console()
        self._enabled = enabled and console.is_terminal
        self._refresh_every = refresh_every
        self._fields = {"episode_return": float("nan"), "eval_return": float("nan")}
        self._start = time.perf_counter()
        self._progress = Progress(
            TextColumn("[bold]actor steps"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>7.0f} steps/s"),
            TextColumn("episode {task.fields[episode_return]:>7.1f}"),
            TextColumn("eval {task.fields[eval_return]:>7.1f}"),
            TimeRemainingColumn(),
            console=console,
            disable=not self._enabled,
        )
        self._task = self._progress.add_task("train", total=total_steps, rate=0.0, **self._fields)
        self._step = 0

    @property
    def enabled(self) -> bool:
        return self._enabled

    def __enter__(self) -> "ProgressDisplay":
        if self._enabled:  # A disabled rich Live still prints a newline when it stops.
            self._progress.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if not self._enabled:
            return
        if self._step:
            self._refresh()  # End on the true final count, not the last multiple of refresh_every.
        self._progress.stop()

    def update(self, **fields: float) -> None:
        self._fields.update(fields)

    def advance(self, step: int, force: bool = False) -> None:
        self._step = step
        if self._enabled and (force or step % self._refresh_every == 0):
            self._refresh()

    def _refresh(self) -> None:
        rate = self._step / max(time.perf_counter() - self._start, 1e-9)
        self._progress.update(self._task, completed=self._step, rate=rate, **self._fields)
