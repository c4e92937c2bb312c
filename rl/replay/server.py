"""Reverb's side: the server (checkpointing only with the checkpointer a run passes, so no temporary
directory is left), its watched client, the tables and the replay-ratio rules they enforce."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import reverb
import tensorflow as tf

from rl.core import EnvironmentSpec
from rl.replay.adders import transition_codec

# TensorFlow only serves reverb's datasets: keep it off any accelerator JAX may use.
tf.config.set_visible_devices([], "GPU")


@dataclasses.dataclass(frozen=True)
class ReplayRatio:
    """A `SampleToInsertRatio` rate limiter and the stepping rule of a one-thread loop (`can_sample`);
    samples may run ahead of the ratio by `error_buffer`'s first part, lag by its second (or both)."""

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float | tuple[float, float]

    @property
    def min_diff(self) -> float:
        ahead = self.error_buffer if isinstance(self.error_buffer, (int, float)) else self.error_buffer[0]
        return self.samples_per_insert * self.min_size_to_sample - float(ahead)

    @property
    def max_diff(self) -> float:
        behind = self.error_buffer if isinstance(self.error_buffer, (int, float)) else self.error_buffer[1]
        return self.samples_per_insert * self.min_size_to_sample + float(behind)

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
        """Whether a one-thread learner that has consumed `samples` may take another batch."""
        return inserts >= self.min_size_to_sample and samples <= self.target_samples(inserts)


# Inserts one actor step may add (n-step tails at episode ends); batches a dataset samples ahead.
INSERT_SLACK = 256
PREFETCH_BATCHES = 2


def make_error_buffer(samples_per_insert: float, samples_per_learner_step: int) -> tuple[float, float]:
    """(ahead, behind) the target: ahead by the learner's batch and those its dataset prefetches,
    behind by that plus `INSERT_SLACK` inserts (an actor step never blocks on a keen learner)."""
    ahead = (1 + PREFETCH_BATCHES) * samples_per_learner_step
    return float(ahead), ahead + INSERT_SLACK * samples_per_insert


def make_sequence_table(
    name: str,
    signature: Any,
    max_size: int,
    rate_limiter: reverb.rate_limiters.RateLimiter,
    priority_exponent: float | None = 0.6,
) -> reverb.Table:
    """A FIFO table of items of `signature`, sampled by priority ** `priority_exponent` (None: uniformly)."""
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
    """A FIFO table of transitions (uniform or prioritized), laid out by `transition_codec`."""
    signature = transition_codec(environment_spec).signature()
    return make_sequence_table(name, signature, max_size, rate_limiter, priority_exponent if prioritized else None)


class NoCheckpointer(reverb.checkpointers.CheckpointerBase):
    """A server without checkpoints: nothing on disk, and `Client.checkpoint()` fails."""

    def internal_checkpointer(self) -> None:
        return None  # The C++ server's "no checkpointer".


def make_server(
    tables: Sequence[reverb.Table],
    port: int | None = None,
    checkpointer: reverb.checkpointers.CheckpointerBase | None = None,
) -> reverb.Server:
    """A reverb server of `tables` on `port` (None: a free one), checkpointing with `checkpointer`, if any."""
    return reverb.Server(list(tables), port=port, checkpointer=checkpointer or NoCheckpointer())


class WatchedClient(reverb.Client):
    """A reverb client whose `replaced()` tells whether a new server replaced its own (an adder then stops waiting)."""

    def __init__(self, server_address: str, replaced: Callable[[], bool]):
        super().__init__(server_address)
        self.replaced = replaced


@dataclasses.dataclass(frozen=True)
class QueueRatio:
    """A one-process learner's stepping rule for a queue: a batch as soon as a whole one is unconsumed."""

    batch_size: int
    max_size: int

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_size < self.batch_size:
            raise ValueError(
                f"the queue holds at most {self.max_size} items, fewer than one batch of {self.batch_size}: "
                "the learner could never sample"
            )

    def can_sample(self, inserts: int, samples: int) -> bool:
        """Whether a learner that has consumed `samples` items may take the next batch."""
        return inserts - samples >= self.batch_size


def make_queue_table(name: str, max_size: int, signature: Any) -> reverb.Table:
    """A FIFO queue of at most `max_size` items, each sampled once: inserts wait while it is full."""
    return reverb.Table.queue(name=name, max_size=int(max_size), signature=signature)
