"""Hierarchical step counters: each node counts under its own prefix (`actor_steps`) into one root
and reads back every count, so any record carries `actor_steps`, the x-axis all curves share."""

from __future__ import annotations

import threading
import time
from typing import Mapping

Number = int | float


class Counter:
    """Thread-safe counts with an optional parent that receives every increment."""

    def __init__(self, parent: "Counter | None" = None, prefix: str = "", time_delta: float = 1.0):
        self._parent = parent
        self._prefix = f"{prefix}_" if prefix else ""
        self._time_delta = time_delta
        self._counts: dict[str, Number] = {}
        self._lock = threading.Lock()
        self._cached: dict[str, Number] | None = None
        self._cached_at = 0.0

    def increment(self, **counts: Number) -> dict[str, Number]:
        with self._lock:
            for key, value in counts.items():
                self._counts[key] = self._counts.get(key, 0) + value
            if self._parent is None:
                return dict(self._counts)
        return self._tell_parent(counts)

    def _tell_parent(self, counts: Mapping[str, Number]) -> dict[str, Number]:
        self._cached = dict(self._parent.increment(**{self._prefix + key: value for key, value in counts.items()}))
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

    def save(self) -> Mapping[str, Number]:
        with self._lock:
            return dict(self._counts)

    def restore(self, counts: Mapping[str, Number]) -> None:
        """Sets this node's own counts (from `save`) and moves its parent's by the same amounts."""
        with self._lock:
            previous, self._counts = self._counts, dict(counts)
            if self._parent is None:
                return
            keys = dict.fromkeys([*previous, *self._counts])
            deltas = {key: self._counts.get(key, 0) - previous.get(key, 0) for key in keys}
        deltas = {key: delta for key, delta in deltas.items() if delta != 0}
        if deltas:
            self._tell_parent(deltas)
