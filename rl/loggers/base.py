"""The logger interface (a record is a flat mapping of names to numbers or strings), the
terminal logger and the loggers that wrap others: fan-out, rate limits, fixed fields, wall time."""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import re
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import rich
from rich.markup import escape

LoggingData = Mapping[str, Any]
COUNT_KEY = re.compile(r"^(?P<node>[a-z0-9]+)_(steps|episodes)$")  # Any node's: `learner_steps`, ...
TRANSCRIPT = logging.getLogger("rl.transcript")


class Logger:
    """Writes each record to a sink; this base drops them (NoOpLogger: a node's loggers by default)."""

    def write(self, data: LoggingData) -> None:
        pass

    def close(self) -> None:
        pass


NoOpLogger = Logger


class LoggerFactory:
    """Makes a node's logger (`factory(label, steps_key, instance)`); holds the run's clock
    (`start_time`, epoch seconds), W&B run and end (None, no-ops: none)."""

    start_time: float | None = None
    wandb_run: Any = None

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        raise NotImplementedError

    def start(self) -> None:
        """Before the first step: the W&B run shows up, with its config, even if the run fails."""
        if self.wandb_run is not None:
            self.wandb_run.start()

    def record_summary(self, summary: Mapping[str, Any]) -> None:
        """The run's results (summary.json's fields), for the trackers."""

    def close(self, exit_code: int = 0) -> None:
        """Closes every sink (idempotent); W&B marks the run finished, or failed for a non-zero code."""

    def replica(self, directory: str, index: int, seed: int) -> "LoggerFactory":
        """The factory of replica `index` (launcher=anakin) writing under `directory`."""
        return self


def to_python_scalar(value: Any) -> Any:
    """numpy/JAX scalars as Python numbers, arrays as lists: what every sink can store."""
    array = np.asarray(value)
    return array.item() if array.size == 1 else array.tolist()


class Dispatcher(Logger):
    """Writes each record to several loggers; with a `clock`, adds `fields` (a node's `<label>_id`) and
    stamps it with `wall_time_s`, seconds since the run started, unless it has one (from another process)."""

    def __init__(
        self, loggers: Sequence[Logger], clock: Callable[[], float] | None = None, fields: LoggingData | None = None
    ):
        self._loggers = list(loggers)
        self._clock = clock
        self._fields = dict(fields or {})

    def write(self, data: LoggingData) -> None:
        data = {**self._fields, **data}
        if self._clock is not None and "wall_time_s" not in data:
            data["wall_time_s"] = round(self._clock(), 3)
        for logger in self._loggers:
            logger.write(data)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class TimeFilter(Dispatcher):
    """Passes at most one record every `time_delta` seconds (all of them when it is 0)."""

    def __init__(self, logger: Logger, time_delta: float):
        super().__init__([logger])
        self._time_delta = time_delta
        self._last = -float("inf")

    def write(self, data: LoggingData) -> None:
        now = time.monotonic()
        if self._time_delta <= 0 or now - self._last >= self._time_delta:
            self._last = now
            super().write(data)


class StepFilter(Dispatcher):
    """Passes the first record in each window of `every` counts of `steps_key` (a schedule
    independent of the run's speed); `get_state`/`set_state`: the last window passed."""

    def __init__(self, logger: Logger, steps_key: str, every: int):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        super().__init__([logger])
        self._steps_key = steps_key
        self._every = every
        self._window = -1

    def write(self, data: LoggingData) -> None:
        window = int(data.get(self._steps_key, 0)) // self._every
        if window > self._window:
            self._window = window
            super().write(data)

    def get_state(self) -> int:
        return self._window

    def set_state(self, window: int) -> None:
        self._window = int(window)


def format_number(value: Any) -> str:
    """Integers whole, other numbers to about 4 significant figures, the rest as `str` gives
    them: 1709 -> 1709, 224.0 -> 224, 15.137 -> 15.14, 0.38374 -> 0.384, 123456.7 -> 123457."""
    value = to_python_scalar(value)
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    if value == int(value) or abs(value) >= 1000:  # Whole, or too large for a fraction to matter.
        return f"{value:.0f}" if value else "0"
    return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3g}"


def _fields(data: LoggingData, hidden: tuple[str, ...], steps_key: str | None) -> list[tuple[str, str]]:
    """(key, number) pairs: steps key, `actor_steps`, metrics, counts (each A-Z), `wall_time_s`."""
    groups = {"wall_time_s": 4, "actor_steps": 1, steps_key or "actor_steps": 0}  # The others: 2, counts 3.
    rank = lambda key: (groups.get(key, 2 + bool(COUNT_KEY.match(key))), key)
    return [(key, format_number(data[key])) for key in sorted(data, key=rank) if key not in hidden]


# Shown first when a terminal line must leave fields out: what a reader follows a run by.
HEADLINE = ("episode_return", "loss", "steps_per_second", "episode_length", "wall_time_s")


def fit_fields(
    fields: list[tuple[str, str]], width: int | None, used: int, steps_key: str | None
) -> list[tuple[str, str]]:
    """`fields` (in their order) that fit a line of `width` characters of which `used` are taken: the steps
    keys, then HEADLINE, then the rest as ordered, and ("+", N) counting those left out; an `event` (a
    launcher's) always, whole. None: all of them."""
    sizes = {key: len(key) + len(value) + 2 for key, value in fields}  # " key=value"
    if width is None or used + sum(sizes.values()) <= width:
        return fields
    order = {key: rank for rank, key in enumerate(("event", steps_key, "actor_steps", *HEADLINE)) if key}
    room = width - used - len(f" +{len(fields)}")
    chosen = set()
    for key in sorted(sizes, key=lambda key: order.get(key, math.inf)):  # Stable: the rest keep their order.
        if sizes[key] > room and key != "event":  # A launcher's event is shown whole.
            break
        room -= sizes[key]
        chosen.add(key)
    return [(key, value) for key, value in fields if key in chosen] + [("+", str(len(fields) - len(chosen)))]


def _line(name: str, fields: list[tuple[str, str]]) -> str:
    return f"[{name}] " + " ".join(f"+{value}" if key == "+" else f"{key}={value}" for key, value in fields)


def format_record(name: str, data: LoggingData, hidden: tuple[str, ...] = (), steps_key: str | None = None) -> str:
    """`[name] key=value key=value ...` on one line."""
    return _line(name, _fields(data, hidden, steps_key))


class ConsoleFormatter(logging.Formatter):
    """A library or launcher message on the terminal as the run's records read: `[warning] message`, after
    `prefix` (conf/hydra/job_logging/rl.yaml); train.log stamps the same line with its time. The terminal
    lines of the run's records and reports start with the same prefix (`console_prefix`)."""

    def __init__(self, *args: Any, prefix: str = "", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prefix}[{record.levelname.lower()}] {super().format(record)}"

    def with_prefix(self, prefix: str) -> "ConsoleFormatter":
        twin = copy.copy(self)
        twin.prefix = prefix
        return twin


def _console_handlers() -> list[logging.Handler]:
    return [handler for handler in logging.getLogger().handlers if isinstance(handler.formatter, ConsoleFormatter)]


def console_prefix() -> str:
    """What the terminal's lines start with now: a multirun job's `[job 3] ` (parallel jobs' lines interleave),
    a grid group's `[group 0_0_0] `; "" outside them, and where no `ConsoleFormatter` prints (no Hydra job)."""
    return next((handler.formatter.prefix for handler in _console_handlers()), "")


@contextlib.contextmanager
def console_prefixed(prefix: str) -> Iterator[None]:
    """While open, the terminal's lines start with `prefix`: it is the console handler's formatter's, the one
    place where a terminal line's look is set (train.log, one per job, has no prefix)."""
    handlers = _console_handlers()
    formatters = [handler.formatter for handler in handlers]
    for handler, formatter in zip(handlers, formatters):
        handler.setFormatter(formatter.with_prefix(prefix))
    try:
        yield
    finally:
        for handler, formatter in zip(handlers, formatters):
            handler.setFormatter(formatter)


class TerminalLogger(Logger):
    """`[label instance] key=value ...` on one line (rich's console on a terminal; plain and
    unwrapped to a pipe), also to the `rl.transcript` logger (`train.log` only)."""

    def __init__(self, label: str, instance: int | None = None, steps_key: str | None = None, width: int | None = None):
        """`width`: the longest line, fields past it left out (counted as `+N`); None: every field."""
        self._name = label if instance is None else f"{label} {instance}"
        self._hidden = (f"{label}_id",) if instance is not None else ()
        self._steps_key = steps_key
        self._width = width

    def write(self, data: LoggingData) -> None:
        prefix = f"{console_prefix()}[{self._name}]"
        fields = fit_fields(_fields(data, self._hidden, self._steps_key), self._width, len(prefix), self._steps_key)
        markup = " ".join(
            f"[dim]+{escape(value)}[/dim]" if key == "+" else f"[dim]{escape(key)}=[/dim]{escape(value)}"
            for key, value in fields
        )
        name = escape(prefix)
        console = rich.get_console()  # Unstyled and unwrapped to a pipe.
        console.print(f"[bold]{name}[/bold] {markup}", highlight=False, soft_wrap=not console.is_terminal)
        TRANSCRIPT.info(_line(self._name, fields))
