"""Sequence replay: items of `sequence_length` rows of one copy's steps, a new one every
`period` rows, never across an episode boundary. An episode's end adds a row of the final
observation (mask 0, zero action, reward and discount: a truncation bootstraps from it),
then zero rows. `period = sequence_length - 1` puts every step in one item (PPO, IMPALA);
a smaller one overlaps items (R2D2, whose first-row extras hold the recurrent state)."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import dm_env
import numpy as np
import reverb
import tree
from dm_env import specs

from rl.replay.adders import Adder
from rl.replay.codecs import stored_actions
from rl.core import EnvironmentSpec


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
        lambda s: tf.TensorSpec((sequence_length, *s.shape), tf.as_dtype(s.dtype), s.name),
        step_spec(environment_spec, extras_spec),
    )


def decode_sequences(data: Any) -> SequenceStep:
    """A sampled batch (reverb rebuilds the signature's structure) as a SequenceStep."""
    return SequenceStep(*data) if isinstance(data, tuple) else SequenceStep(**data)


class SequenceAdder(Adder):
    """Writes each copy's items from preallocated arrays (per leaf, a leading axis over the
    copies). `add` takes the actor's `extras` (one row per copy, as in `step_spec`)."""

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
        # A row's leaves in column order, the observation's first; per leaf, a buffer of
        # (copies, sequence_length, ...), and per observation leaf each copy's current one.
        leaf_specs = tree.flatten(spec)
        self._num_observation_leaves = len(tree.flatten(spec.observation))
        self._mask_leaf = self._num_observation_leaves + len(tree.flatten(spec.action)) + 2
        self._buffers = [np.zeros((0, sequence_length, *s.shape), s.dtype) for s in leaf_specs]
        self._observations = [np.zeros((0, *s.shape), s.dtype) for s in leaf_specs[: self._num_observation_leaves]]
        self._positions = np.zeros(0, np.int64)  # Rows filled per copy.
        self._fresh = np.zeros(0, np.int64)  # Rows appended since the copy's last item.

    def _reserve(self, copies: int) -> None:
        """Room for `copies` streams (buffers grow when a larger copy id shows up)."""
        if copies <= self._capacity:
            return

        def grow(old: np.ndarray) -> np.ndarray:
            return np.pad(old, [(0, copies - len(old))] + [(0, 0)] * (old.ndim - 1))

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
        return {name.lstrip("_"): vars(self)[name] for name in self._STATE}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for name in self._STATE:
            setattr(self, name, state[name.lstrip("_")])

    def reset(self, timeout_ms: int | None = None) -> None:
        self._positions[:] = 0
        self._fresh[:] = 0
        super().reset(timeout_ms)
