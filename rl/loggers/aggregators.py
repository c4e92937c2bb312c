"""Loggers that wrap other loggers: fan-out, rate limiting, constant fields, wall time."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from rl.loggers.base import Logger, LoggingData


class Dispatcher(Logger):
    """Writes each record to several loggers."""

    def __init__(self, loggers: Sequence[Logger]):
        self._loggers = list(loggers)

    def write(self, data: LoggingData) -> None:
        for logger in self._loggers:
            logger.write(data)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class TimeFilter(Logger):
    """Passes at most one record every `time_delta` seconds (all of them when it is 0)."""

    def __init__(self, logger: Logger, time_delta: float):
        self._logger = logger
        self._time_delta = time_delta
        self._last = -float("inf")

    def write(self, data: LoggingData) -> None:
        now = time.monotonic()
        if self._time_delta <= 0 or now - self._last >= self._time_delta:
            self._last = now
            self._logger.write(data)

    def close(self) -> None:
        self._logger.close()


class StepFilter(Logger):
    """Passes the first record in each window of `every` counts of `steps_key` (the one
    at or after each multiple): a schedule that, unlike `TimeFilter`'s, does not depend
    on how fast the run goes."""

    def __init__(self, logger: Logger, steps_key: str, every: int):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self._logger = logger
        self._steps_key = steps_key
        self._every = every
        self._window = -1

    def write(self, data: LoggingData) -> None:
        window = int(data.get(self._steps_key, 0)) // self._every
        if window > self._window:
            self._window = window
            self._logger.write(data)

    def get_state(self) -> int:
        """The last window a record passed in (a resumed deterministic run continues it)."""
        return self._window

    def set_state(self, window: int) -> None:
        self._window = int(window)

    def close(self) -> None:
        self._logger.close()


class ConstantFields(Logger):
    """Adds fixed fields (an actor id, say) to every record."""

    def __init__(self, logger: Logger, fields: Mapping[str, Any]):
        self._logger = logger
        self._fields = dict(fields)

    def write(self, data: LoggingData) -> None:
        self._logger.write({**self._fields, **data})

    def close(self) -> None:
        self._logger.close()


WALL_TIME_KEY = "wall_time_s"


class WallTime(Logger):
    """Stamps each record with `wall_time_s`, the seconds since the run started as told by
    `clock` (a callable returning them).

    A record that already carries `wall_time_s` (stamped where it was made, in another
    process) keeps it.
    """

    def __init__(self, logger: Logger, clock: Callable[[], float]):
        self._logger = logger
        self._clock = clock

    def write(self, data: LoggingData) -> None:
        if WALL_TIME_KEY not in data:
            data = {**data, WALL_TIME_KEY: round(self._clock(), 3)}
        self._logger.write(data)

    def close(self) -> None:
        self._logger.close()
