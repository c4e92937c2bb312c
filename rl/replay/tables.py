"""Reverb table factories and the replay-ratio rule they enforce. Importing this module
imports reverb and so TensorFlow: only replay code should."""

from __future__ import annotations

import dataclasses
from typing import Any

import reverb
import tensorflow as tf

from rl.replay.codecs import transition_codec
from rl.specs import EnvironmentSpec

# TensorFlow is only here for reverb's datasets: keep it off any accelerator JAX may use.
tf.config.set_visible_devices([], "GPU")


@dataclasses.dataclass(frozen=True)
class ReplayRatio:
    """A `SampleToInsertRatio` rate limiter (the gate of learners on their own thread or
    node), and the stepping rule of a loop that acts and learns on one thread
    (`can_sample`).

    The target is `samples_per_insert` samples per item inserted once `min_size_to_sample`
    items are in; samples may run ahead of it by the first part of `error_buffer` and lag
    behind it by the second (a single number is both).
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float | tuple[float, float]

    @property
    def _buffer(self) -> tuple[float, float]:
        """(ahead, behind): how far samples may run ahead of the target, and lag."""
        buffer = self.error_buffer
        ahead, behind = (buffer, buffer) if isinstance(buffer, (int, float)) else buffer
        return float(ahead), float(behind)

    @property
    def min_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample - self._buffer[0]

    @property
    def max_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample + self._buffer[1]

    def make_rate_limiter(self) -> reverb.rate_limiters.RateLimiter:
        return reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=self.samples_per_insert,
            min_size_to_sample=self.min_size_to_sample,
            error_buffer=(self.min_diff, self.max_diff),
        )

    def target_samples(self, inserts: int) -> float:
        """Samples the ratio calls for after `inserts` items (negative before the minimum)."""
        return (inserts - self.min_size_to_sample) * self.samples_per_insert

    def can_sample(self, inserts: int, samples: int) -> bool:
        """Whether a single-process learner that has consumed `samples` may take another batch."""
        return inserts >= self.min_size_to_sample and samples <= self.target_samples(inserts)


# Inserts one actor step may add (copies ending episodes flush their n-step tails), and
# batches a dataset may sample ahead.
INSERT_SLACK = 256
PREFETCH_BATCHES = 2


def make_error_buffer(samples_per_insert: float, samples_per_learner_step: int) -> tuple[float, float]:
    """Reverb's slack around the target, (ahead, behind): samples may run ahead by the
    learner's batch and the batches its dataset prefetches (so `next` rarely waits); they
    may lag by that plus `INSERT_SLACK` inserts, so an actor step never blocks on a learner
    that takes every batch it may."""
    ahead = (1 + PREFETCH_BATCHES) * samples_per_learner_step
    return float(ahead), ahead + INSERT_SLACK * samples_per_insert


def make_sequence_table(
    name: str,
    signature: Any,
    max_size: int,
    rate_limiter: reverb.rate_limiters.RateLimiter,
    priority_exponent: float | None = 0.6,
) -> reverb.Table:
    """A FIFO table of items of `signature` (e.g. R2D2's sequences), sampled in proportion
    to priority ** `priority_exponent` (None: uniformly)."""
    sampler = (
        reverb.selectors.Uniform() if priority_exponent is None else reverb.selectors.Prioritized(priority_exponent)
    )
    return reverb.Table(
        name=name,
        sampler=sampler,
        remover=reverb.selectors.Fifo(),
        max_size=int(max_size),
        rate_limiter=rate_limiter,
        signature=signature,
    )


def make_transition_table(
    name: str,
    environment_spec: EnvironmentSpec,
    max_size: int,
    rate_limiter: reverb.rate_limiters.RateLimiter,
    prioritized: bool = False,
    priority_exponent: float = 0.6,
) -> reverb.Table:
    """A FIFO table of transitions sampled uniformly or in proportion to priority, laid
    out by `transition_codec` (packed into one column where that is exact and small)."""
    signature = transition_codec(environment_spec).signature()
    return make_sequence_table(name, signature, max_size, rate_limiter, priority_exponent if prioritized else None)
