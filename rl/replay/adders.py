"""Adders turn an actor's stream of timesteps into replay items."""

from __future__ import annotations

import abc
import collections
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import dm_env
import numpy as np
import tree

from rl.core import Transition

if TYPE_CHECKING:
    import reverb


class ReplayTimeoutError(TimeoutError):
    """A replay write or sample that did not complete within its bound."""


# A write waits in slices of this many milliseconds (see `Adder._wait`).
WRITE_SLICE_MS = 2_000


def item_inserter(writer: Any) -> Callable[[str, float, Sequence[np.ndarray]], None]:
    """`insert(table, priority, columns)`: one step of `columns` and one item of it. Reverb's
    writer goes through its C++ writer (the one private reverb call): reverb 0.14's Python
    wrapper re-validates the structure per call, twice the cost (pinned in test_seeded_replay)."""
    import reverb

    if not isinstance(writer, reverb.TrajectoryWriter):
        return writer.insert_item  # A SeededReplay.
    native = writer._writer  # noqa: SLF001 - see the docstring.

    def insert(table: str, priority: float, columns: Sequence[np.ndarray]) -> None:
        references = native.Append(columns)
        native.CreateItem(table, priority, [[reference] for reference in references], [True] * len(references))

    return insert


class Adder(abc.ABC):
    """Turns an actor's batched timesteps into items through one trajectory writer. Row `k`
    is copy `env_ids[k]` (None: `k`) of a vector environment; an item holds one copy's steps."""

    def __init__(self, client: reverb.Client, table: str, timeout_ms: int):
        self._client = client
        self._writer = client.trajectory_writer(num_keep_alive_refs=1)
        self._insert = item_inserter(self._writer)
        self._table = table
        self._timeout_ms = timeout_ms
        self._num_items = 0

    @abc.abstractmethod
    def add_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        """Starts an episode in each copy named."""

    @abc.abstractmethod
    def add(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        """Records one step of each copy named: the actions taken and where they led."""

    @property
    def num_items(self) -> int:
        """Items created so far: the inserts a rate limiter counts."""
        return self._num_items

    def _wait(self, call: Callable[..., Any], what: str, timeout_ms: int, **kwargs: Any) -> None:
        """`call(timeout_ms=slice, **kwargs)` until it completes; a `ReplayTimeoutError` after
        `timeout_ms`, or at once when a `WatchedClient`'s server was replaced."""
        from reverb.errors import DeadlineExceededError

        from rl.replay.server import WatchedClient

        replaced = self._client.replaced if isinstance(self._client, WatchedClient) else None
        where = f"replay server at {self._client.server_address}: {what}"
        left = timeout_ms
        while True:
            wait = min(left, WRITE_SLICE_MS) if replaced is not None else left
            try:
                return call(timeout_ms=wait, **kwargs)
            except DeadlineExceededError:
                left -= wait
            if left <= 0:
                raise ReplayTimeoutError(f"{where} did not complete within {timeout_ms / 1000:g} s")
            if replaced():
                raise ReplayTimeoutError(f"{where} was cut short, the server was replaced")

    def _flush(self, pending: int) -> None:
        """Waits until at most `pending` items are not yet confirmed."""
        self._wait(
            self._writer.flush, f"a flush to table {self._table!r}", self._timeout_ms, block_until_num_items=pending
        )

    def reset(self, timeout_ms: int | None = None) -> None:
        """Ends the episode once its items are confirmed; subclasses drop their partial state first."""
        what = f"the end of an episode in table {self._table!r}"
        self._wait(self._writer.end_episode, what, timeout_ms or self._timeout_ms, clear_buffers=True)

    def close(self) -> None:
        self._writer.close()


def n_step_return(rewards: list[float], discounts: list[float], gamma: float) -> tuple[float, float]:
    """The discounted return and the bootstrap factor after it; a 0 in `discounts` stops both."""
    total, factor = 0.0, 1.0
    for reward, discount in zip(rewards, discounts):
        total += factor * reward
        factor *= gamma * discount
    return total, factor


def _row(batch: Any, k: int) -> Any:
    return tree.map_structure(lambda leaf: leaf[k], batch)


class NStepTransitionAdder(Adder):
    """Writes (s_t, a_t, R_t^(n), gamma^m * prod(d), s_{t+m}), m <= n, per copy, and at an
    episode end its last n-1 steps' shorter ones. `codec` (rl.replay.codecs) lays them out
    (None: a column per leaf)."""

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        n_step: int,
        discount: float,
        priority: float = 1.0,
        max_pending_items: int = 16,
        timeout_ms: int = 120_000,
        codec: Any = None,
    ):
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        super().__init__(client, table, timeout_ms)
        self._encode = tree.flatten if codec is None else codec.encode
        self._n_step = n_step
        self._gamma = discount
        self._priority = priority
        self._max_pending_items = max_pending_items
        self._windows: dict[int, collections.deque] = {}
        self._observations: dict[int, Any] = {}
        self._unflushed = 0

    def add_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        for k, env_id in enumerate(range(len(timestep.step_type)) if env_ids is None else env_ids):
            self._windows[int(env_id)] = collections.deque()
            self._observations[int(env_id)] = _row(timestep.observation, k)

    def add(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        rewards = next_timestep.reward.tolist()
        discounts = next_timestep.discount.tolist()
        lasts = (next_timestep.step_type == dm_env.StepType.LAST).tolist()
        for k, env_id in enumerate(range(len(lasts)) if env_ids is None else env_ids):
            window = self._windows[int(env_id)]
            window.append((self._observations[int(env_id)], actions[k], rewards[k], discounts[k]))
            observation = self._observations[int(env_id)] = _row(next_timestep.observation, k)
            while len(window) == self._n_step or (lasts[k] and window):
                self._write_oldest(window, observation)

    def _write_oldest(self, window: collections.deque, next_observation: Any) -> None:
        observation, action, _, _ = window[0]
        reward, discount = n_step_return([s[2] for s in window], [s[3] for s in window], self._gamma)
        window.popleft()
        transition = Transition(observation, action, np.float32(reward), np.float32(discount), next_observation)
        self._insert(self._table, self._priority, self._encode(transition))
        self._num_items += 1
        self._unflushed += 1
        if self._unflushed >= self._max_pending_items:
            # At most 2 * max_pending_items items in flight: no hoarded memory, and no
            # warning (reverb 0.14 warns from about 50 pending items).
            self._flush(self._max_pending_items)
            self._unflushed = 0

    def get_state(self) -> dict[str, Any]:
        """Each copy's window and observation, and the count (a deterministic run's checkpoint)."""
        return {
            "windows": {k: list(w) for k, w in self._windows.items()},
            "observations": dict(self._observations),
            "num_items": self._num_items,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._windows = {int(k): collections.deque(w) for k, w in state["windows"].items()}
        self._observations = dict(state["observations"])
        self._num_items = int(state["num_items"])

    def reset(self, timeout_ms: int | None = None) -> None:
        self._windows.clear()
        self._observations.clear()
        super().reset(timeout_ms)
        self._unflushed = 0
