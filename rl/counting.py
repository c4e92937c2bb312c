"""Hierarchical step counters shared by the nodes of an experiment.

Each node counts under its own prefix (`actor_steps`, `learner_steps`, ...) into one root
counter, and reads back every count, so any record it logs carries `actor_steps`: the
x-axis all curves share.
"""

from __future__ import annotations

import threading
import time
from typing import Mapping

Number = int | float


class Counter:
    """Thread-safe counts with an optional parent that receives every increment."""

    def __init__(self, parent: "Counter | None" = None, prefix: str = "", time_delta: float = 1.0):
        self._parent = parent
        self._prefix = prefix
        self._time_delta = time_delta
        self._counts: dict[str, Number] = {}
        self._lock = threading.Lock()
        self._cached: dict[str, Number] | None = None
        self._cached_at = 0.0

    def _key(self, key: str) -> str:
        return f"{self._prefix}_{key}" if self._prefix else key

    def increment(self, **counts: Number) -> dict[str, Number]:
        with self._lock:
            for key, value in counts.items():
                self._counts[key] = self._counts.get(key, 0) + value
            if self._parent is None:
                return dict(self._counts)
        self._cached = dict(self._parent.increment(**{self._key(k): v for k, v in counts.items()}))
        self._cached_at = time.monotonic()
        return dict(self._cached)

    def get_counts(self) -> dict[str, Number]:
        """Every count in the hierarchy; a child sees the root's totals, its own included."""
        if self._parent is None:
            with self._lock:
                return dict(self._counts)
        # A remote parent may be slow to ask: reuse its answer for `time_delta` seconds.
        now = time.monotonic()
        if self._cached is None or now - self._cached_at >= self._time_delta:
            self._cached = dict(self._parent.get_counts())
            self._cached_at = now
        return dict(self._cached)

    def get_steps_key(self) -> str:
        return self._key("steps")

    def save(self) -> Mapping[str, Number]:
        with self._lock:
            return dict(self._counts)

    def restore(self, counts: Mapping[str, Number]) -> None:
        with self._lock:
            self._counts = dict(counts)
