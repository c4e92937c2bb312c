"""Hierarchical step counters: each node counts under its own prefix (`actor_steps`) into one root
and reads back every count, so any record carries `actor_steps`, the x-axis all curves share."""

from __future__ import annotations

import collections
import threading
from typing import Mapping

Number = int | float


class Counter:
    """Thread-safe counts with an optional parent that receives every increment, prefixed."""

    def __init__(self, parent: "Counter | None" = None, prefix: str = ""):
        self._parent = parent
        self._prefix = f"{prefix}_" if prefix else ""
        self._counts: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def increment(self, **counts: Number) -> dict[str, Number]:
        with self._lock:
            self._counts.update(counts)
            if self._parent is None:
                return dict(self._counts)
        return self._parent.increment(**{self._prefix + key: value for key, value in counts.items()})

    def get_counts(self) -> dict[str, Number]:
        """Every count in the hierarchy; a child sees the root's totals, its own included."""
        return self.save() if self._parent is None else self._parent.get_counts()

    def save(self) -> Mapping[str, Number]:
        with self._lock:
            return dict(self._counts)

    def restore(self, counts: Mapping[str, Number]) -> None:
        """Sets this node's own counts (from `save`) and moves its parent's by the same amounts."""
        with self._lock:
            previous = self._counts
            self._counts = collections.Counter(counts)
            keys = {**previous, **self._counts}
            deltas = {key: self._counts[key] - previous[key] for key in keys if self._counts[key] != previous[key]}
        if deltas and self._parent is not None:
            self._parent.increment(**{self._prefix + key: value for key, value in deltas.items()})
