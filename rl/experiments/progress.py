"""A one-line live progress bar (actor steps, rate, latest returns, time left) that fits
80 columns; log lines printed through rich scroll above it. Silent when output is not a terminal.
"""

from __future__ import annotations

import math
import time
from typing import Any

import rich
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Column


def _return_text(value: float) -> str:
    """A return for the bar: one decimal, `-` before there is one."""
    value = float(value) if value is not None else math.nan
    return "-" if not math.isfinite(value) else f"{value:.1f}"


def _rate_text(rate: float) -> str:
    """Steps per second in at most 5 characters: 812, 15.3k, 123k, 2.1M."""
    if rate < 1e4:
        return f"{rate:.0f}"
    scale, suffix = (1e3, "k") if rate < 1e6 else (1e6, "M")
    return f"{rate / scale:.1f}{suffix}" if rate < 100 * scale else f"{rate / scale:.0f}{suffix}"


class ProgressDisplay:
    """Actor steps out of the budget, steps/s, ETA and the latest returns."""

    def __init__(self, total_steps: int, enabled: bool = True, refresh_every: int = 200):
        console = rich.get_console()
        self.enabled = enabled and console.is_terminal
        self._refresh_every = refresh_every
        self._fields = {"episode_return": float("nan"), "eval_return": float("nan")}
        self._start = time.perf_counter()
        self._step = 0
        self._progress = Progress(
            TextColumn("[bold]steps", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=None, table_column=Column(ratio=1)),  # The width the others leave.
            MofNCompleteColumn(table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[rate]:>5}/s"),
            TextColumn("return {task.fields[episode_return]:>7}"),
            TextColumn("eval {task.fields[eval_return]:>7}"),
            TimeRemainingColumn(),
            console=console,
            disable=not self.enabled,
            expand=True,
        )
        self._task = self._progress.add_task("train", total=total_steps, rate="-", **self._texts())

    def __enter__(self) -> "ProgressDisplay":
        if self.enabled:  # A disabled rich Live still prints a newline when it stops.
            self._progress.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            if self._step:
                self._refresh()  # End on the true final count, not the last multiple of refresh_every.
            self._progress.stop()

    def update(self, **fields: float) -> None:
        self._fields.update(fields)

    def advance(self, step: int, force: bool = False) -> None:
        self._step = step
        if self.enabled and (force or step % self._refresh_every == 0):
            self._refresh()

    def _refresh(self) -> None:
        rate = self._step / max(time.perf_counter() - self._start, 1e-9)
        self._progress.update(self._task, completed=self._step, rate=_rate_text(rate), **self._texts())

    def _texts(self) -> dict[str, str]:
        return {key: _return_text(value) for key, value in self._fields.items()}
