"""Reverb table factories and the replay-ratio rule they enforce.

Importing this module imports reverb and so TensorFlow: only replay code should.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import reverb
import tensorflow as tf
import tree
from dm_env import specs

from rl.specs import EnvironmentSpec
from rl.types import Transition

# TensorFlow is only here for reverb's datasets: keep it off any accelerator JAX may use.
tf.config.set_visible_devices([], "GPU")


@dataclasses.dataclass(frozen=True)
class ReplayRatio:
    """A `SampleToInsertRatio` rate limiter, also evaluable in Python.

    The single-process loop asks `can_sample` before stepping the learner, so it never
    blocks on its own replay while the table keeps the same ratio that a distributed run
    enforces between processes. The rule mirrors reverb's: sampling `n` items needs
    `min_size_to_sample` inserts and `inserts * samples_per_insert - samples - n >= min_diff`;
    inserting needs `inserts * samples_per_insert - samples <= max_diff` (after the first
    `min_size_to_sample` items).
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float

    @property
    def min_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample - self.error_buffer

    @property
    def max_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample + self.error_buffer

    def make_rate_limiter(self) -> reverb.rate_limiters.RateLimiter:
        return reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=self.samples_per_insert,
            min_size_to_sample=self.min_size_to_sample,
            error_buffer=(self.min_diff, self.max_diff),
        )

    def can_sample(self, inserts: int, samples: int, num_samples: int) -> bool:
        if inserts < self.min_size_to_sample:
            return False
        return inserts * self.samples_per_insert - samples - num_samples >= self.min_diff


def min_size_rate_limiter(min_size_to_sample: int) -> reverb.rate_limiters.RateLimiter:
    return reverb.rate_limiters.MinSize(min_size_to_sample)


def _tensor_spec(spec: Any) -> tf.TensorSpec:
    dtype = np.int32 if isinstance(spec, specs.DiscreteArray) else spec.dtype
    return tf.TensorSpec(shape=spec.shape, dtype=tf.as_dtype(dtype), name=spec.name)


def transition_signature(environment_spec: EnvironmentSpec) -> Transition:
    """The reverb signature of one `Transition`: every column at least rank 0 with a dtype."""
    observation = tree.map_structure(_tensor_spec, environment_spec.observations)
    return Transition(
        observation=observation,
        action=tree.map_structure(_tensor_spec, environment_spec.actions),
        reward=tf.TensorSpec((), tf.float32, "reward"),
        discount=tf.TensorSpec((), tf.float32, "discount"),
        next_observation=observation,
    )


def make_transition_table(
    name: str,
    environment_spec: EnvironmentSpec,
    max_size: int,
    rate_limiter: reverb.rate_limiters.RateLimiter,
    prioritized: bool = False,
    priority_exponent: float = 0.6,
) -> reverb.Table:
    """A FIFO table of transitions sampled uniformly or in proportion to priority."""
    sampler = (
        reverb.selectors.Prioritized(priority_exponent) if prioritized else reverb.selectors.Uniform()
    )
    return reverb.Table(
        name=name,
        sampler=sampler,
        remover=reverb.selectors.Fifo(),
        max_size=int(max_size),
        rate_limiter=rate_limiter,
        signature=transition_signature(environment_spec),
    )


def make_server(tables: list[reverb.Table], port: int | None = None) -> reverb.Server:
    return reverb.Server(tables, port=port)


NO_LIMIT = sys.float_info.max
