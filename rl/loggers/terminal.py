"""Prints each record on one line (rich's console on a terminal; plain and unwrapped to a pipe)
and sends it to the `rl.transcript` logger, which conf/hydra/job_logging/rl.yaml writes to
`train.log` only. Keys: steps key, `actor_steps`, metrics and counts (each A-Z), `wall_time_s`:

    [actor 0] actor_steps=1709 episode_length=39 episode_return=39 actor_episodes=138 learner_steps=221 wall_time_s=8.77
"""

from __future__ import annotations

import logging
import math
from typing import Any

import rich
from rich.markup import escape

from rl.loggers.base import COUNT_KEY, Logger, LoggingData, to_python_scalar

TRANSCRIPT = logging.getLogger("rl.transcript")


def format_number(value: Any) -> str:
    """Integers whole, other numbers to about 4 significant figures, the rest as `str` gives
    them: 1709 -> 1709, 224.0 -> 224, 15.137 -> 15.14, 0.38374 -> 0.384, 123456.7 -> 123457."""
    value = to_python_scalar(value)
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3g}"


def _fields(data: LoggingData, hidden: tuple[str, ...], steps_key: str | None) -> list[tuple[str, str]]:
    """(key, number) pairs in the module docstring's order (`steps_key` None: `actor_steps`)."""
    leading = (steps_key or "actor_steps", "actor_steps")

    def rank(key: str) -> tuple[int, str]:
        group = leading.index(key) if key in leading else 4 if key == "wall_time_s" else 2 + bool(COUNT_KEY.match(key))
        return (group, key)

    return [(key, format_number(data[key])) for key in sorted(data, key=rank) if key not in hidden]


def format_record(name: str, data: LoggingData, hidden: tuple[str, ...] = (), steps_key: str | None = None) -> str:
    """`[name] key=value key=value ...` on one line."""
    return f"[{name}] " + " ".join(f"{key}={value}" for key, value in _fields(data, hidden, steps_key))


class TerminalLogger(Logger):
    """`[label instance] key=value ...`; with the instance in the name, `<label>_id` is not repeated."""

    def __init__(self, label: str, instance: int | None = None, steps_key: str | None = None):
        self._name = label if instance is None else f"{label} {instance}"
        self._hidden = (f"{label}_id",) if instance is not None else ()
        self._steps_key = steps_key

    def write(self, data: LoggingData) -> None:
        line = format_record(self._name, data, self._hidden, self._steps_key)
        console = rich.get_console()
        if console.is_terminal:
            fields = _fields(data, self._hidden, self._steps_key)
            markup = " ".join(f"[dim]{escape(key)}=[/dim]{escape(value)}" for key, value in fields)
            console.print(f"[bold]{escape(f'[{self._name}]')}[/bold] {markup}", markup=True, highlight=False)
        else:  # A pipe or a file: never wrapped, no styles.
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        TRANSCRIPT.info(line)
