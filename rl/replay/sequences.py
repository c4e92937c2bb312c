"""Sequence replay: fixed-length sequences of one environment copy's consecutive steps.

`SequenceAdder` cuts each copy's steps into items of `sequence_length` rows, a new one
every `period` rows, never across an episode boundary. A row (`SequenceStep`) holds o_t,
the action a_t, the reward r_t and discount d_t after it, `mask` (1 for a step taken) and
the actor's `extras` at o_t. An episode's end (termination or truncation) adds one row of
the final observation (mask 0; zero action, reward and discount), so a truncation
(d_t = 1) bootstraps from it, then pads the item with zero rows. With `period =
sequence_length - 1` every step taken is a non-final row of exactly one item (PPO,
IMPALA); a smaller period overlaps items (R2D2, whose first-row extras hold the
recurrent state). An item is one writer step (a chunk per column). Imports reverb (and TF).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import dm_env
import numpy as np
import reverb
import tree
from dm_env import specs

from rl.replay.adders import Adder
from rl.replay.codecs import stored_actions
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
    return SequenceStep(
        observation=environment_spec.observations,
        action=stored_actions(environment_spec.actions),
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
    return SequenceStep(**(data._asdict() if hasattr(data, "_asdict") else data))


class SequenceAdder(Adder):
    """Writes `sequence_length`-row items of each copy's steps, one every `period` rows,
    from preallocated arrays (per leaf, a leading axis over the copies). `add` takes the
    actor's `extras` (a dict of arrays, one row per copy, matching `step_spec`'s)."""

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
        super().__init__(client, table, timeout_ms)
        self._spec = spec
        self._length = sequence_length
        self._period = period
        self._priority = priority
        self._capacity = 0
        # A row's leaves in the table's column order, the observation's first.
        self._leaf_specs = tree.flatten(spec)
        self._num_observation_leaves = len(tree.flatten(spec.observation))
        self._mask_leaf = self._num_observation_leaves + len(tree.flatten(spec.action)) + 2
        # Per leaf: (copies, sequence_length, ...); per observation leaf, each copy's
        # current one.
        self._buffers = [np.zeros((0, sequence_length, *s.shape), s.dtype) for s in self._leaf_specs]
        self._observations = [
            np.zeros((0, *s.shape), s.dtype) for s in self._leaf_specs[: self._num_observation_leaves]
        ]
        self._positions = np.zeros(0, np.int64)  # Rows filled per copy.
        self._fresh = np.zeros(0, np.int64)  # Rows appended since the copy's last item.

    def _reserve(self, copies: int) -> None:
        """Room for `copies` streams (buffers grow when a larger copy id shows up)."""
        if copies <= self._capacity:
            return

        def grow(old: np.ndarray) -> np.ndarray:
            new = np.zeros((copies, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            return new

        self._buffers = [grow(buffer) for buffer in self._buffers]
        self._observations = [grow(current) for current in self._observations]
        self._positions = grow(self._positions)
        self._fresh = grow(self._fresh)
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
        if not self._capacity:
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
        before = self._num_items
        for env_id in ids[self._positions[ids] == self._length]:
            self._write(int(env_id))
        for env_id in ids[next_timestep.step_type == dm_env.StepType.LAST]:
            self._end_episode(int(env_id))
        if self._num_items > before:
            # Fewer items than copies may wait outside the table: a full queue holds the
            # actor here until the learner makes room, and a one-thread loop (act, then
            # learn) never waits on itself.
            self._flush(self._capacity - 1)

    def _end_episode(self, env_id: int) -> None:
        """Appends the final observation's row, then writes what no item holds yet, padded."""
        position = int(self._positions[env_id])
        for index, buffer in enumerate(self._buffers):
            buffer[env_id, position] = self._observations[index][env_id] if index < self._num_observation_leaves else 0
        self._positions[env_id] += 1
        self._fresh[env_id] += 1
        if self._positions[env_id] == self._length:
            self._write(env_id)
        start = int(self._positions[env_id])
        # Rows appended since the last item, among them a step taken: one no item holds.
        if self._fresh[env_id] > 0 and self._buffers[self._mask_leaf][env_id, :start].any():
            for buffer in self._buffers:
                buffer[env_id, start:] = 0
            self._write(env_id)
        self._positions[env_id] = 0
        self._fresh[env_id] = 0

    def _write(self, env_id: int) -> None:
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

    _STATE = ("_buffers", "_observations", "_positions", "_fresh", "_num_items", "_capacity")

    def get_state(self) -> dict[str, Any]:
        """Each copy's partial sequence and the counts (a deterministic run's checkpoint)."""
        return {name.lstrip("_"): getattr(self, name) for name in self._STATE}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for name in self._STATE:
            setattr(self, name, state[name.lstrip("_")])

    def reset(self, timeout_ms: int | None = None) -> None:
        self._positions[:] = 0
        self._fresh[:] = 0
        super().reset(timeout_ms)
