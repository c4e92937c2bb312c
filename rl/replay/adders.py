"""Adders turn an actor's stream of timesteps into replay items: n-step transitions (laid out
by a codec: a column per leaf, or packed into one float32 vector) or sequences (`SequenceAdder`)."""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import dm_env
import numpy as np
import tree
from dm_env import specs

from rl.core import EnvironmentSpec, Transition, is_discrete
from rl.compat import native_trajectory_writer

if TYPE_CHECKING:
    import reverb


class ReplayTimeoutError(TimeoutError):
    """A replay write or sample that did not complete within its bound."""


WRITE_SLICE_MS = 2_000


def item_inserter(writer: Any) -> Callable[[str, float, Sequence[np.ndarray]], None]:
    """`insert(table, priority, columns)`: one step of `columns` and one item of it, through reverb's
    C++ writer (rl.compat: the Python wrapper re-validates every call)."""
    import reverb

    if not isinstance(writer, reverb.TrajectoryWriter):
        return writer.insert_item  # A SeededReplay's.
    native = native_trajectory_writer(writer)

    def insert(table: str, priority: float, columns: Sequence[np.ndarray]) -> None:
        references = native.Append(columns)
        native.CreateItem(table, priority, [[reference] for reference in references], [True] * len(references))

    return insert


class Adder(abc.ABC):
    """Turns an actor's batched timesteps (row `k`: copy `env_ids[k]`, None: `k`) into items of one
    copy's steps, each at priority 1."""

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

    num_items = property(lambda self: self._num_items, doc="Items created so far: the inserts a rate limiter counts.")

    def _wait(self, call: Callable[..., Any], what: str, **kwargs: Any) -> None:
        """`call(timeout_ms=slice, **kwargs)` until it completes; a `ReplayTimeoutError` after the
        adder's `timeout_ms`, or at once when a `WatchedClient`'s server was replaced."""
        from reverb.errors import DeadlineExceededError

        from rl.replay.client import WatchedClient

        replaced = self._client.replaced if isinstance(self._client, WatchedClient) else None
        where = f"replay server at {self._client.server_address}: {what}"
        left = self._timeout_ms
        while True:
            wait = min(left, WRITE_SLICE_MS) if replaced is not None else left
            try:
                return call(timeout_ms=wait, **kwargs)
            except DeadlineExceededError:
                left -= wait
            if left <= 0:
                raise ReplayTimeoutError(f"{where} did not complete within {self._timeout_ms / 1000:g} s")
            if replaced():
                raise ReplayTimeoutError(f"{where} was cut short, the server was replaced")

    def _flush(self, pending: int) -> None:
        """Waits until at most `pending` items are not yet confirmed."""
        self._wait(self._writer.flush, f"a flush to table {self._table!r}", block_until_num_items=pending)

    def get_state(self) -> dict[str, Any]:
        """Each copy's partial items and the count (a deterministic run's checkpoint)."""
        return {"num_items": self._num_items}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._num_items = state["num_items"]

    def reset(self) -> None:
        """Ends the episode once its items are confirmed; subclasses drop their partial state first."""
        self._wait(self._writer.end_episode, f"the end of an episode in table {self._table!r}", clear_buffers=True)

    def close(self) -> None:
        self._writer.close()


def n_step_return(rewards: list[float], discounts: list[float], gamma: float) -> tuple[float, float]:
    """The discounted return and the bootstrap factor after it; a 0 in `discounts` stops both.

    The compiled path's `rl.systems.off_policy.n_step_transitions` computes the same sum, written a second time
    on purpose: this one runs on the host, per copy, as each step reaches the adder (Python floats, a step at
    a time, before reverb holds anything); that one runs traced on the device over a sampled (B, n) batch,
    masked where an episode ended inside the window. One function cannot serve both without moving every
    actor step onto the device or every sampled batch off it."""
    total = 0.0
    factor = 1.0
    for reward, discount in zip(rewards, discounts):
        total += factor * reward
        factor *= gamma * discount
    return total, factor


def _row(batch: Any, k: int) -> Any:
    return tree.map_structure(lambda leaf: leaf[k], batch)


class NStepTransitionAdder(Adder):
    """Writes (s_t, a_t, R_t^(n), gamma^m * prod(d), s_{t+m}), m <= n, per copy, and at an episode
    end its last n-1 steps' shorter ones, laid out by `codec` (None: a column per leaf)."""

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        n_step: int,
        discount: float,
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
        self._max_pending_items = max_pending_items
        self._windows: dict[int, list] = {}
        self._observations: dict[int, Any] = {}
        self._unflushed = 0

    def add_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        for k, env_id in enumerate(range(len(timestep.step_type)) if env_ids is None else env_ids):
            self._windows[int(env_id)] = []
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
                reward, discount = n_step_return([s[2] for s in window], [s[3] for s in window], self._gamma)
                first, action, _, _ = window.pop(0)
                transition = Transition(first, action, np.float32(reward), np.float32(discount), observation)
                self._insert(self._table, 1.0, self._encode(transition))
                self._num_items += 1
                self._unflushed += 1
                if self._unflushed >= self._max_pending_items:
                    # At most 2 * max_pending_items in flight (reverb warns of many more).
                    self._flush(self._max_pending_items)
                    self._unflushed = 0

    def get_state(self) -> dict[str, Any]:
        return {"windows": self._windows, "observations": self._observations, **super().get_state()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._windows = state["windows"]
        self._observations = state["observations"]
        super().set_state(state)

    def reset(self) -> None:
        self._windows.clear()
        self._observations.clear()
        super().reset()
        self._unflushed = 0


MAX_PACKED_VALUES = 4096  # Larger transitions (pixels) keep a column per leaf.
FLOAT32_EXACT_INTEGERS = 2**24


def tensor_specs(spec: Any, leading: tuple[int, ...] = ()) -> Any:
    """The TensorSpecs (a reverb signature) of a structure of dm_env specs, `leading` axes first."""
    import tensorflow as tf

    return tree.map_structure(lambda s: tf.TensorSpec((*leading, *s.shape), tf.as_dtype(s.dtype), s.name), spec)


def _packable(spec: Any) -> bool:
    """Whether float32 holds every value of this (environment) leaf exactly."""
    dtype = np.dtype(spec.dtype)
    if dtype in (np.float32, np.bool_) or (dtype.kind in "iu" and dtype.itemsize <= 2):
        return True
    if isinstance(spec, specs.DiscreteArray):
        return spec.num_values <= FLOAT32_EXACT_INTEGERS
    bounds = (spec.minimum, spec.maximum) if isinstance(spec, specs.BoundedArray) else [np.inf]
    return dtype.kind in "iu" and all(np.all(np.abs(bound) < FLOAT32_EXACT_INTEGERS) for bound in bounds)


class ColumnCodec:
    """One reverb column per leaf of the transition (the general layout)."""

    def __init__(self, environment_spec: EnvironmentSpec):
        observation, action, reward, discount, _, _ = step_spec(environment_spec)
        self.leaf_specs = Transition(observation, action, reward, discount, observation)

    def signature(self) -> Any:
        return tensor_specs(self.leaf_specs)

    def encode(self, transition: Transition) -> list[Any]:
        """One transition's columns, in the signature's order."""
        return tree.flatten(transition)

    def decode(self, data: Any) -> Transition:
        """A sampled batch as a Transition of arrays."""
        return data


class PackedCodec(ColumnCodec):
    """Every leaf, ravelled and cast to float32, side by side in one vector."""

    def __init__(self, environment_spec: EnvironmentSpec):
        super().__init__(environment_spec)
        self._leaves = tree.flatten(self.leaf_specs)
        self._bounds = np.cumsum([0] + [math.prod(s.shape) for s in self._leaves]).tolist()
        self.size = self._bounds[-1]

    def signature(self) -> Any:
        import tensorflow as tf

        return tf.TensorSpec((self.size,), tf.float32, "transition")

    def encode(self, transition: Transition) -> list[Any]:
        return [np.concatenate([np.asarray(leaf, np.float32).ravel() for leaf in tree.flatten(transition)])]

    def decode(self, data: Any) -> Transition:
        data = np.asarray(data)
        batch = data.shape[:-1]
        leaves = [
            data[..., start:end].reshape(batch + tuple(spec.shape)).astype(spec.dtype, copy=False)
            for spec, start, end in zip(self._leaves, self._bounds[:-1], self._bounds[1:])
        ]
        return tree.unflatten_as(self.leaf_specs, leaves)


def transition_codec(environment_spec: EnvironmentSpec) -> ColumnCodec:
    """The packed layout where it is exact and small, one column per leaf otherwise."""
    size = sum(math.prod(s.shape) for s in tree.flatten(ColumnCodec(environment_spec).leaf_specs))
    leaves = tree.flatten(environment_spec.observations) + tree.flatten(environment_spec.actions)
    if size <= MAX_PACKED_VALUES and all(_packable(s) for s in leaves):
        return PackedCodec(environment_spec)
    return ColumnCodec(environment_spec)


class SequenceStep(NamedTuple):
    """One row: o_t, a_t, then r_t and d_t after it; sampled, (batch, time, ...) fields."""

    observation: Any
    action: Any
    reward: Any
    discount: Any
    mask: Any  # 1.0 for a step taken; 0.0 for the final observation row and the padding.
    extras: Any  # The actor's, at o_t (a dict of arrays), e.g. {"log_prob": ...}.


def step_spec(environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any] | None = None) -> SequenceStep:
    """The dm_env spec of one row: discrete actions are int32 scalars."""
    return SequenceStep(
        observation=environment_spec.observations,
        action=tree.map_structure(
            lambda s: specs.Array((), np.int32, s.name) if is_discrete(s) else s, environment_spec.actions
        ),
        reward=specs.Array((), np.float32, "reward"),
        discount=specs.Array((), np.float32, "discount"),
        mask=specs.Array((), np.float32, "mask"),
        extras=dict(extras_spec or {}),
    )


def sequence_signature(
    environment_spec: EnvironmentSpec, sequence_length: int, extras_spec: Mapping[str, Any] | None = None
) -> SequenceStep:
    """The reverb signature of an item: every row field with a leading time axis."""
    return tensor_specs(step_spec(environment_spec, extras_spec), (sequence_length,))


def decode_sequences(data: Any) -> SequenceStep:
    """A sampled batch (reverb rebuilds the signature's structure) as a SequenceStep."""
    return SequenceStep(*data) if isinstance(data, tuple) else SequenceStep(**data)


class SequenceAdder(Adder):
    """Items of `sequence_length` rows of one copy's steps, one every `period` rows, never across an
    episode's end, which adds a row of the final observation (mask 0), then zero rows."""

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        spec: SequenceStep,
        sequence_length: int,
        period: int | None = None,
        timeout_ms: int = 120_000,
    ):
        period = sequence_length if period is None else period
        if sequence_length < 2:
            raise ValueError(f"sequence_length must be >= 2, got {sequence_length}")
        if not 1 <= period <= sequence_length:
            raise ValueError(f"period must be in [1, sequence_length={sequence_length}], got {period}")
        super().__init__(client, table, timeout_ms)
        self._spec = spec
        self._length = sequence_length
        self._period = period
        # Per leaf (column order), a buffer of (copies, sequence_length, ...); each copy's observation.
        leaf_specs = tree.flatten(spec)
        self._num_observation_leaves = len(tree.flatten(spec.observation))
        self._mask_leaf = self._num_observation_leaves + len(tree.flatten(spec.action)) + 2
        self._buffers = [np.zeros((0, sequence_length, *s.shape), s.dtype) for s in leaf_specs]
        self._observations = [np.zeros((0, *s.shape), s.dtype) for s in leaf_specs[: self._num_observation_leaves]]
        self._positions = np.zeros(0, np.int64)  # Rows filled per copy.

    def add_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        ids = np.arange(len(timestep.step_type)) if env_ids is None else np.asarray(env_ids, np.int64)
        copies = int(ids.max()) + 1
        if copies > len(self._positions):  # Buffers grow when a larger copy id shows up.
            grow = lambda old: np.pad(old, [(0, copies - len(old))] + [(0, 0)] * (old.ndim - 1))
            self._buffers = [grow(buffer) for buffer in self._buffers]
            self._observations = [grow(current) for current in self._observations]
            self._positions = grow(self._positions)
        self._positions[ids] = 0
        for current, observation in zip(self._observations, tree.flatten(timestep.observation)):
            current[ids] = observation

    def add(
        self,
        actions: Any,
        next_timestep: dm_env.TimeStep,
        env_ids: Sequence[int] | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        if not len(self._positions):
            raise RuntimeError("add_first must start an episode before add")
        ids = np.arange(len(next_timestep.step_type)) if env_ids is None else np.asarray(env_ids, np.int64)
        positions = self._positions[ids]
        values = [
            *(current[ids] for current in self._observations),
            *tree.flatten(actions),
            next_timestep.reward,
            next_timestep.discount,
            1.0,  # mask: a step taken
            *tree.flatten(dict(extras or {})),
        ]
        if len(values) != len(self._buffers):
            raise ValueError(
                f"a step has {len(values)} leaves but the table's rows have {len(self._buffers)}: "
                f"check the extras ({sorted(extras or {})}) against the spec's ({sorted(self._spec.extras)})"
            )
        for buffer, value in zip(self._buffers, values):
            buffer[ids, positions] = value
        self._positions[ids] += 1
        for current, observation in zip(self._observations, tree.flatten(next_timestep.observation)):
            current[ids] = observation
        before = self._num_items
        for env_id in ids[self._positions[ids] == self._length]:
            self._write(int(env_id))
        for env_id in ids[next_timestep.step_type == dm_env.StepType.LAST]:
            self._end_episode(int(env_id))
        if self._num_items > before:
            # Fewer items than copies may wait: a full queue holds the actor here until the
            # learner makes room, and a one-thread loop (act, then learn) never waits on itself.
            self._flush(len(self._positions) - 1)

    def _end_episode(self, env_id: int) -> None:
        """Appends the final observation's row and zero rows; an item of them where a step taken is among them."""
        position = int(self._positions[env_id])
        for index, buffer in enumerate(self._buffers):
            buffer[env_id, position] = self._observations[index][env_id] if index < self._num_observation_leaves else 0
            buffer[env_id, position + 1 :] = 0
        if self._buffers[self._mask_leaf][env_id, : position + 1].any():
            self._write(env_id)
        self._positions[env_id] = 0

    def _write(self, env_id: int) -> None:
        """Inserts copy `env_id`'s full buffer as one item and keeps its overlap rows."""
        columns = [np.ascontiguousarray(buffer[env_id]) for buffer in self._buffers]
        self._insert(self._table, 1.0, columns)
        self._num_items += 1
        overlap = self._length - self._period
        if overlap:
            for buffer in self._buffers:
                buffer[env_id, :overlap] = buffer[env_id, self._period :]
        self._positions[env_id] = overlap

    def get_state(self) -> dict[str, Any]:
        state = {"buffers": self._buffers, "observations": self._observations, "positions": self._positions}
        return {**state, **super().get_state()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._buffers = state["buffers"]
        self._observations = state["observations"]
        self._positions = state["positions"]
        super().set_state(state)

    def reset(self) -> None:
        self._positions[:] = 0
        super().reset()
