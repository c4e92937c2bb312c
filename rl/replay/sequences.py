"""Sequence replay: fixed-length sequences of one environment copy's consecutive steps.

On-policy and recurrent agents (PPO, IMPALA, R2D2) learn from sequences rather than
single transitions. `SequenceAdder` cuts each copy's stream of steps into items of
`sequence_length` rows, a new item starting every `period` rows (so consecutive items
share `sequence_length - period` rows), and never lets an item cross an episode boundary.

A row is a `SequenceStep`: the observation o_t, the action a_t taken there, the reward
r_t and environment discount d_t received after it, `mask` (1 for a step actually taken)
and the actor's `extras` at o_t (the behaviour policy's log-probability, a recurrent
core state, ...). When an episode ends (termination or truncation alike) the adder
appends one more row holding the final observation (mask 0, zero action, reward and
discount), then pads the item with zero rows (mask 0) and writes it. So:

* a termination has d_t = 0: nothing is bootstrapped from the final observation;
* a truncation (time limit) has d_t = 1: the final observation's row is in the item and
  its value bootstraps the return, although the policy never acts there;
* with `period = sequence_length - 1` every step taken is a non-final row of exactly one
  item, an item's last row only serving as the bootstrap (PPO, IMPALA); a smaller period
  repeats rows in several items (R2D2's overlap, where the extras at an item's first row
  hold the recurrent state to start from).

Items are written whole: one item is one trajectory-writer step of arrays with a leading
time axis, so all copies of a vector environment share one writer and an item is one
chunk per column. Importing this module imports reverb (and so TensorFlow).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import dm_env
import numpy as np
import reverb
import tree
from dm_env import specs

from rl.replay.adders import Adder, bounded_write, end_episode, item_inserter
from rl.specs import EnvironmentSpec


class SequenceStep(NamedTuple):
    """One row of a stored sequence; in a sampled item every field has a leading time
    axis (and a batch axis before it)."""

    observation: Any
    action: Any
    reward: Any
    discount: Any
    # 1.0 for a step taken; 0.0 for the final observation row and the padding after it.
    mask: Any
    # Per-step extras of the actor (a dict of arrays), e.g. {"log_prob": ...}.
    extras: Any


def step_spec(environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any] | None = None) -> SequenceStep:
    """The dm_env spec of one row: discrete actions are int32 scalars."""
    actions = tree.map_structure(
        lambda s: specs.Array((), np.int32, s.name) if isinstance(s, specs.DiscreteArray) else s,
        environment_spec.actions,
    )
    return SequenceStep(
        observation=environment_spec.observations,
        action=actions,
        reward=specs.Array((), np.float32, "reward"),
        discount=specs.Array((), np.float32, "discount"),
        mask=specs.Array((), np.float32, "mask"),
        extras=dict(extras_spec or {}),
    )


def sequence_signature(
    environment_spec: EnvironmentSpec, sequence_length: int, extras_spec: Mapping[str, Any] | None = None
) -> SequenceStep:
    """The reverb signature of an item: every row field with a leading time axis."""
    import tensorflow as tf

    return tree.map_structure(
        lambda s: tf.TensorSpec((sequence_length, *s.shape), tf.as_dtype(s.dtype), getattr(s, "name", None)),
        step_spec(environment_spec, extras_spec),
    )


def decode_sequences(data: Any) -> SequenceStep:
    """A sampled batch (reverb rebuilds the signature's structure) as a SequenceStep."""
    if isinstance(data, SequenceStep):
        return data
    return SequenceStep(**data._asdict()) if hasattr(data, "_asdict") else SequenceStep(**data)


class SequenceAdder(Adder):
    """Writes `sequence_length`-row items of each copy's steps, one every `period` rows.

    Rows are kept in preallocated arrays, one per leaf of a row with a leading axis over
    the copies, filled for all copies of a step with one vectorised write per leaf. `add` takes
    the actor's `extras` for the rows it records (a dict of arrays, one row per copy);
    they must match `step_spec`'s extras. After a step that completed items the writer
    is flushed down to fewer items in flight than there are copies: a queue table
    blocks that flush while it is full, which is how actors wait for the learner.
    """

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        spec: SequenceStep,
        sequence_length: int,
        period: int | None = None,
        priority: float = 1.0,
        timeout_ms: int = 120_000,
    ):
        period = sequence_length if period is None else period
        if sequence_length < 2:
            raise ValueError(f"sequence_length must be >= 2, got {sequence_length}")
        if not 1 <= period <= sequence_length:
            raise ValueError(f"period must be in [1, sequence_length={sequence_length}], got {period}")
        self._client = client
        self._writer = client.trajectory_writer(num_keep_alive_refs=1)
        self._insert = item_inserter(self._writer)
        self._table = table
        self._spec = spec
        self._length = sequence_length
        self._period = period
        self._priority = priority
        self._timeout_ms = timeout_ms
        self._num_items = 0
        self._capacity = 0
        # Every leaf of a row, flattened in the table's column order (tree.flatten of the
        # spec); the observation's leaves come first (SequenceStep's first field).
        self._leaf_specs = tree.flatten(spec)
        self._num_observation_leaves = len(tree.flatten(spec.observation))
        self._mask_leaf = self._num_observation_leaves + len(tree.flatten(spec.action)) + 2
        self._buffers: list[np.ndarray] = []  # Per leaf: (copies, sequence_length, ...).
        self._observations: list[np.ndarray] = []  # Per observation leaf: each copy's current one.
        self._positions = np.zeros(0, np.int64)  # Rows filled per copy.
        self._fresh = np.zeros(0, np.int64)  # Rows appended since the copy's last item.

    @property
    def num_items(self) -> int:
        return self._num_items

    @property
    def sequence_length(self) -> int:
        return self._length

    @property
    def period(self) -> int:
        return self._period

    def _reserve(self, copies: int) -> None:
        """Room for `copies` streams (buffers grow when a larger copy id shows up)."""
        if copies <= self._capacity:
            return

        def grow(old: np.ndarray | None, spec: Any, rows: tuple[int, ...]) -> np.ndarray:
            new = np.zeros((copies, *rows, *spec.shape), spec.dtype)
            if old is not None:
                new[: old.shape[0]] = old
            return new

        specs_ = self._leaf_specs
        self._buffers = [
            grow(self._buffers[i] if self._buffers else None, s, (self._length,)) for i, s in enumerate(specs_)
        ]
        self._observations = [
            grow(self._observations[i] if self._observations else None, s, ())
            for i, s in enumerate(specs_[: self._num_observation_leaves])
        ]
        self._positions = np.concatenate([self._positions, np.zeros(copies - self._capacity, np.int64)])
        self._fresh = np.concatenate([self._fresh, np.zeros(copies - self._capacity, np.int64)])
        self._capacity = copies

    def add_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        ids = np.arange(len(timestep.step_type)) if env_ids is None else np.asarray(env_ids, np.int64)
        self._reserve(int(ids.max()) + 1)
        self._positions[ids] = 0
        self._fresh[ids] = 0
        for current, observation in zip(self._observations, tree.flatten(timestep.observation)):
            current[ids] = observation

    def add(
        self,
        actions: Any,
        next_timestep: dm_env.TimeStep,
        env_ids: Sequence[int] | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        if not self._buffers:
            raise RuntimeError("add_first must start an episode before add")
        count = len(next_timestep.step_type)
        ids = np.arange(count) if env_ids is None else np.asarray(env_ids, np.int64)
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
        self._fresh[ids] += 1
        for current, observation in zip(self._observations, tree.flatten(next_timestep.observation)):
            current[ids] = observation
        written = 0
        for env_id in ids[self._positions[ids] == self._length]:
            written += self._write(int(env_id))
        for env_id in ids[next_timestep.step_type == dm_env.StepType.LAST]:
            written += self._end_episode(int(env_id))
        if written:
            # At most one item per copy (less one) may still wait outside the table: a full
            # queue holds the actor here until the learner makes room. The slack keeps a
            # one-thread loop (act, then learn) from waiting on itself: a learner that takes
            # a batch as soon as one is counted leaves at most this many items outside a
            # queue that holds at least a batch.
            bounded_write(
                lambda wait: self._writer.flush(block_until_num_items=self._capacity - 1, timeout_ms=wait),
                f"a flush to table {self._table!r}",
                self._client,
                self._timeout_ms,
            )

    def _end_episode(self, env_id: int) -> int:
        """Appends the final observation's row, then writes what no item holds yet, padded."""
        written = 0
        position = int(self._positions[env_id])
        for index, buffer in enumerate(self._buffers):
            buffer[env_id, position] = self._observations[index][env_id] if index < self._num_observation_leaves else 0
        self._positions[env_id] += 1
        self._fresh[env_id] += 1
        if self._positions[env_id] == self._length:
            written += self._write(env_id)
        start = int(self._positions[env_id])
        if (
            self._fresh[env_id] > 0 and self._buffers[self._mask_leaf][env_id, :start].any()
        ):  # A step no item holds yet.
            for buffer in self._buffers:
                buffer[env_id, start:] = 0
            written += self._write(env_id)
        self._positions[env_id] = 0
        self._fresh[env_id] = 0
        return written

    def _write(self, env_id: int) -> int:
        """Inserts copy `env_id`'s full buffer as one item and keeps its overlap rows."""
        columns = [np.ascontiguousarray(buffer[env_id]) for buffer in self._buffers]
        self._insert(self._table, self._priority, columns)
        self._num_items += 1
        overlap = self._length - self._period
        if overlap:
            for buffer in self._buffers:
                buffer[env_id, :overlap] = buffer[env_id, self._period :]
        self._positions[env_id] = overlap
        self._fresh[env_id] = 0
        return 1

    _STATE = ("_buffers", "_observations", "_positions", "_fresh", "_num_items", "_capacity")

    def get_state(self) -> dict[str, Any]:
        """Each copy's partial sequence and the counts (what a deterministic run saves to
        continue exactly); written items are in replay."""
        return {name.lstrip("_"): getattr(self, name) for name in self._STATE}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for name in self._STATE:
            setattr(self, name, state[name.lstrip("_")])

    def reset(self, timeout_ms: int | None = None) -> None:
        """Drops every copy's partial sequence and waits for the items in flight."""
        self._positions[:] = 0
        self._fresh[:] = 0
        end_episode(self._writer, self._table, self._client, timeout_ms or self._timeout_ms)

    def close(self) -> None:
        self._writer.close()
