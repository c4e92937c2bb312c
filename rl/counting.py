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
            previous, self._counts = self._counts, collections.Counter(counts)
            keys = {**previous, **self._counts}
            deltas = {key: self._counts[key] - previous[key] for key in keys if self._counts[key] != previous[key]}
        if deltas and self._parent is not None:
            self._parent.increment(**{self._prefix + key: value for key, value in deltas.items()})


class StepBudget:
    """The actor-step budget of a distributed run, leased to actors; a dead incarnation's leased but
    uncounted steps go back to the budget and its late calls are refused."""

    def __init__(self, total: int):
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        self._total = self._unleased = int(total)
        self._limit: int | None = None  # Steps that may be leased in all, when held at a point.
        self._incarnations: dict[int, int] = {}
        self._outstanding: dict[int, int] = {}
        self._counted: dict[int, int] = {}
        self._lock = threading.Lock()

    def register(self, actor_id: int) -> dict[str, int]:
        """Starts an incarnation of `actor_id`: its `restart`, the `steps` counted, the steps `reclaimed`."""
        with self._lock:
            restart = self._incarnations.get(actor_id, -1) + 1
            self._incarnations[actor_id] = restart
            reclaimed = self._outstanding.get(actor_id, 0)
            self._unleased += reclaimed
            self._outstanding[actor_id] = 0
            return {"restart": restart, "steps": self._counted.get(actor_id, 0), "reclaimed": reclaimed}

    def hold_at(self, steps: int | None) -> None:
        """Leases stop once `steps` of the budget are leased (None: no hold)."""
        with self._lock:
            self._limit = None if steps is None else max(0, int(steps))

    def lease(self, actor_id: int, incarnation: int, wanted: int) -> int:
        """Grants up to `wanted` steps: 0 when spent or stale, -1 while held (ask again)."""
        with self._lock:
            if self._incarnations.get(actor_id) != incarnation:
                return 0
            available = self._unleased
            if self._limit is not None and available > 0:
                available = min(available, self._limit - (self._total - self._unleased))
                if available <= 0:
                    return -1
            granted = max(0, min(int(wanted), available))
            self._unleased -= granted
            self._outstanding[actor_id] += granted
            return granted

    def count(self, actor_id: int, incarnation: int, steps: int) -> bool:
        """Records `steps` taken under the current lease; False for a stale incarnation."""
        with self._lock:
            if self._incarnations.get(actor_id) != incarnation:
                return False
            if steps > self._outstanding[actor_id]:
                raise ValueError(
                    f"actor {actor_id} counted {steps} steps but holds a lease of {self._outstanding[actor_id]}"
                )
            self._outstanding[actor_id] -= steps
            self._counted[actor_id] = self._counted.get(actor_id, 0) + steps
            return True

    def state(self) -> dict[str, object]:
        with self._lock:
            return {
                "unleased": self._unleased,
                "outstanding": dict(self._outstanding),
                "counted": dict(self._counted),
                "restarts": dict(self._incarnations),
            }
