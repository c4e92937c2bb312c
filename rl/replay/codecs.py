"""How a transition is laid out in a reverb table: a column per leaf, or packed into one.
Reverb's costs are per column (chunk): packing a small transition into one float32 vector
about doubles inserts and samples (`scripts/benchmark.py replay`); pixels keep their columns."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tree
from dm_env import specs

from rl.core import EnvironmentSpec, Transition

# Transitions with at most this many values are packed (e.g. proprioceptive states).
MAX_PACKED_VALUES = 4096
# Integers float32 holds exactly.
FLOAT32_EXACT_INTEGERS = 2**24


def stored_actions(action_spec: Any) -> Any:
    """The spec of actions as replay stores them: discrete actions are int32 scalars."""
    return tree.map_structure(
        lambda s: specs.Array((), np.int32, s.name) if isinstance(s, specs.DiscreteArray) else s, action_spec
    )


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
        self.leaf_specs = Transition(
            observation=environment_spec.observations,
            action=stored_actions(environment_spec.actions),
            reward=specs.Array((), np.float32, "reward"),
            discount=specs.Array((), np.float32, "discount"),
            next_observation=environment_spec.observations,
        )

    def signature(self) -> Any:
        import tensorflow as tf

        return tree.map_structure(lambda s: tf.TensorSpec(s.shape, tf.as_dtype(s.dtype), s.name), self.leaf_specs)

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
