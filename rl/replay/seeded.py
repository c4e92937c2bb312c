"""`launcher.deterministic=true`'s replay: reverb's tables kept in the process and sampled by a seeded
generator (reverb's selectors take no seed), standing where a reverb client and its writer would."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import tree

from rl.compat import table_distributions


class SeededTable:
    """One table as reverb keeps it (sampling, priorities, FIFO removal, queues) but never waiting, its
    items lists of columns, drawn by a generator seeded with `seed`."""

    def __init__(self, table: Any, seed: Sequence[int]):
        info = table.info
        self.name: str = info.name
        self.sampler, remover = table_distributions(info)
        if self.sampler not in ("uniform", "prioritized", "fifo"):
            raise ValueError(f"the deterministic mode has no seeded equivalent of reverb's {self.sampler!r} sampler")
        self.priority_exponent = float(info.sampler_options.prioritized.priority_exponent)
        if remover != "fifo":
            raise ValueError(f"table {self.name!r}: the deterministic mode keeps FIFO removal only")
        self.max_size = int(info.max_size)
        if self.sampler == "fifo" and info.max_times_sampled != 1:
            raise ValueError(f"table {self.name!r}: a FIFO sampler is kept for queues only (max_times_sampled=1)")
        self.signature = info.signature
        self._dtypes = [np.dtype(spec.dtype.as_numpy_dtype) for spec in tree.flatten(self.signature)]
        self.rng = np.random.Generator(np.random.PCG64(list(seed)))
        self.inserts = 0  # An item's key is its insert index.
        self.taken = 0  # A queue's items below this key were sampled.
        self._items: list[list[np.ndarray]] = []  # The item of key k in slot k % max_size.
        self._priorities = np.zeros(0, np.float64)

    @property
    def size(self) -> int:
        return self.inserts - max(self.inserts - self.max_size, self.taken)

    def insert(self, priority: float, columns: Sequence[np.ndarray]) -> None:
        if len(columns) != len(self._dtypes):
            raise ValueError(
                f"table {self.name!r}: an item of {len(columns)} columns, the signature has {len(self._dtypes)}"
            )
        columns = [np.array(column, dtype, copy=True) for column, dtype in zip(columns, self._dtypes)]
        slot = self.inserts % self.max_size
        if slot == len(self._items):
            self._items.append(columns)
            if len(self._priorities) <= slot:
                grown = np.zeros(min(self.max_size, max(1024, 2 * len(self._priorities))), np.float64)
                grown[: len(self._priorities)] = self._priorities
                self._priorities = grown
        else:
            self._items[slot] = columns
        self._priorities[slot] = priority
        self.inserts += 1

    def sample(self, batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """(keys, probabilities, table sizes, stacked columns) of `batch_size` items."""
        size = self.size
        oldest = self.inserts - size
        if size == 0 or (self.sampler == "fifo" and size < batch_size):
            raise RuntimeError(f"table {self.name!r} holds {size} items: no batch of {batch_size} to sample")
        if self.sampler == "fifo":
            slots = np.arange(oldest, oldest + batch_size) % self.max_size
            self.taken = oldest + batch_size
            probabilities = np.ones(batch_size, np.float64)
        elif self.sampler == "uniform":
            slots = self.rng.integers(0, size, batch_size)
            probabilities = np.full(batch_size, 1.0 / size)
        else:
            weights = self._priorities[:size] ** self.priority_exponent
            total = weights.sum()
            slots = np.minimum(
                np.searchsorted(np.cumsum(weights), self.rng.random(batch_size) * total, "right"), size - 1
            )
            probabilities = weights[slots] / total
        # Slot s holds the key k in [oldest, inserts) with k % max_size == s.
        keys = (oldest + (slots - oldest) % self.max_size).astype(np.uint64)
        items = [self._items[int(key) % self.max_size] for key in keys]
        columns = [np.stack([item[c] for item in items]) for c in range(len(self._dtypes))]
        return keys, probabilities, np.full(batch_size, size, np.int64), columns

    def mutate_priorities(self, updates: Mapping[int, float]) -> None:
        """New priorities for the items still present (others are ignored, as reverb does)."""
        oldest = self.inserts - self.size
        for key, priority in updates.items():
            if oldest <= int(key) < self.inserts:
                self._priorities[int(key) % self.max_size] = priority

    def get_state(self) -> dict[str, Any]:
        """Items, priorities and the generator's state: a resumed run draws as this one would."""
        state = {
            "name": self.name,
            "sampler": self.sampler,
            "max_size": self.max_size,
            "inserts": self.inserts,
            "taken": self.taken,
        }
        rng = self.rng.bit_generator.state
        return {**state, "items": list(self._items), "priorities": self._priorities.copy(), "rng": rng}

    def set_state(self, state: Mapping[str, Any]) -> None:
        saved = (state["name"], state["sampler"], state["max_size"])
        if saved != (self.name, self.sampler, self.max_size):
            raise ValueError(
                f"the saved table (name, sampler, max_size) {saved} is not this run's "
                f"{(self.name, self.sampler, self.max_size)}"
            )
        self.inserts = int(state["inserts"])
        self.taken = int(state["taken"])
        self._items = list(state["items"])
        self._priorities = np.array(state["priorities"], np.float64)
        self.rng.bit_generator.state = state["rng"]


class SeededReplay:
    """The run's tables, standing where a reverb client and its writer would (nothing is pending)."""

    server_address = "in-process (launcher.deterministic=true)"

    def __init__(self, tables: Sequence[Any], seed: int):
        self.tables = {table.name: SeededTable(table, (int(seed), index)) for index, table in enumerate(tables)}

    def table(self, name: str) -> SeededTable:
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"no replay table {name!r}; the run has {sorted(self.tables)}") from None

    def trajectory_writer(self, num_keep_alive_refs: int = 1) -> SeededReplay:
        return self

    def insert_item(self, table: str, priority: float, columns: Sequence[np.ndarray]) -> None:
        self.table(table).insert(priority, columns)

    def flush(self, **_: Any) -> None:
        pass

    end_episode = close = flush

    def mutate_priorities(self, table: str, updates: Mapping[int, float]) -> None:
        self.table(table).mutate_priorities(updates)

    def get_state(self) -> dict[str, Any]:
        return {name: table.get_state() for name, table in self.tables.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if set(state) != set(self.tables):
            raise ValueError(f"the saved replay has tables {sorted(state)}, this run {sorted(self.tables)}")
        for name, table_state in state.items():
            self.tables[name].set_state(table_state)
