"""Prints each record on one line, and copies it into the run's `train.log`.

On a terminal the line goes through rich's shared console (keys dimmed, wrapped between
`key=value` pairs, kept above the progress bar). When output is a pipe or a file the
same line is written plain and never wrapped, so `grep`, `cut` and `tail -f` see one
record per line:

    [actor 0] actor_steps=1709 episode_length=39 episode_return=39 steps_per_second=224 actor_episodes=138 learner_steps=221 wall_time_s=8.77

Keys come in a stable order: the node's steps key (`learner_steps` for the learner),
`actor_steps` (the x-axis every curve shares) when that is another key, the node's own
metrics in alphabetical order, then the other step and episode counts, then
`wall_time_s`.
Numbers are rounded for reading (the CSV and W&B sinks keep full precision).

Every line is also sent to the `rl.transcript` Python logger. Hydra's job logging
(conf/hydra/job_logging/rl.yaml) sends that logger to the run directory's `train.log`
only, so the file holds what the terminal showed; without Hydra the logger has no
handler and the copy goes nowhere.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import rich
from rich.markup import escape

from rl.loggers.base import Logger, LoggingData, to_python_scalar

TRANSCRIPT = logging.getLogger("rl.transcript")
STEP_KEY = "actor_steps"
WALL_TIME_KEY = "wall_time_s"
# Step and episode counts of any node (`learner_steps`, `evaluator_episodes`, ...).
COUNT_KEY = re.compile(r"^[a-z0-9]+_(steps|episodes)$")


def format_number(value: Any) -> str:
    """A number as a reader wants it: integers whole, others to about 4 significant figures.

    1709 -> 1709, 224.0 -> 224, 15.137 -> 15.14, 0.38374 -> 0.384, 1.2e-05 -> 1.2e-05,
    123456.7 -> 123457; strings and other values as `str` gives them.
    """
    value = to_python_scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.4g}"
    return f"{value:.3g}"


def record_order(keys: list[str] | tuple[str, ...], steps_key: str | None = None) -> list[str]:
    """`steps_key`, `actor_steps`, the other keys alphabetically, the counts, then
    `wall_time_s` (`steps_key` None: `actor_steps` first)."""
    steps_key = steps_key or STEP_KEY

    def rank(key: str) -> tuple[int, str]:
        if key == steps_key:
            return (0, key)
        if key == STEP_KEY:
            return (1, key)
        if key == WALL_TIME_KEY:
            return (4, key)
        if COUNT_KEY.match(key):
            return (3, key)
        return (2, key)

    return sorted(keys, key=rank)


def format_record(name: str, data: LoggingData, hidden: tuple[str, ...] = (), steps_key: str | None = None) -> str:
    """`[name] key=value key=value ...` on one line (see the module docstring)."""
    fields = " ".join(
        f"{key}={format_number(data[key])}" for key in record_order(list(data), steps_key) if key not in hidden
    )
    return f"[{name}] {fields}"


def _markup(name: str, data: LoggingData, hidden: tuple[str, ...], steps_key: str | None) -> str:
    fields = " ".join(
        f"[dim]{escape(key)}=[/dim]{escape(format_number(data[key]))}"
        for key in record_order(list(data), steps_key)
        if key not in hidden
    )
    return f"[bold]{escape(f'[{name}]')}[/bold] {fields}"


class TerminalLogger(Logger):
    """One line per record: `[label instance] key=value ...`.

    `instance` (an actor's or evaluator's number) is shown in the line's name, so the
    record's `<label>_id` field is not repeated. `steps_key` (the node's own step count,
    `learner_steps` for the learner) comes first in the line; None: `actor_steps`.
    """

    def __init__(self, label: str, instance: int | None = None, steps_key: str | None = None):
        self._name = label if instance is None else f"{label} {instance}"
        self._hidden = (f"{label}_id",) if instance is not None else ()
        self._steps_key = steps_key

    def write(self, data: LoggingData) -> None:
        line = format_record(self._name, data, self._hidden, self._steps_key)
        console = rich.get_console()
        if console.is_terminal:
            console.print(_markup(self._name, data, self._hidden, self._steps_key), markup=True, highlight=False)
        else:  # A pipe or a file: never wrapped, no styles.
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        TRANSCRIPT.info(line)
