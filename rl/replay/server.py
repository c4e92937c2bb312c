"""Reverb's side: the server (checkpointing only with the checkpointer a run passes), the tables and
their replay-ratio rules, and the learner's batches: prefetched out of reverb, or out of
`launcher.deterministic=true`'s seeded in-process replay (rl/replay/seeded.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import types
from typing import Any, Callable, Iterator, Sequence

import jax
import numpy as np
import reverb
import tensorflow as tf
import tree

from rl.replay import ReplaySample
from rl.replay.adders import ReplayTimeoutError
from rl.replay.seeded import SeededReplay

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
        return self.samples_per_insert * self.min_size_to_sample - float(np.broadcast_to(self.error_buffer, 2)[0])

    @property
    def max_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample + float(np.broadcast_to(self.error_buffer, 2)[1])

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
    return reverb.Table(name, sampler, reverb.selectors.Fifo(), int(max_size), rate_limiter, signature=signature)


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


# The learner's wait for one batch before it reports replay as stuck (beyond a replay node's restart).
SAMPLE_TIMEOUT_S = 600.0


# A sampler the rate limiter holds this long ends its dataset and a new one starts: a closed iterator's
# thread then leaves while the server is up (after `server.stop()` reverb's sampler retries forever).
SAMPLER_WAKE_MS = 200


def make_dataset(server_address: str, table: str, batch_size: int, wake_ms: int = -1) -> Any:
    """Batches of `batch_size` items of `table`; with `wake_ms >= 0` it ends (its last batch partial)
    once the rate limiter has held a sample that long."""
    dataset = reverb.TrajectoryDataset.from_table_signature(
        server_address=server_address,
        table=table,
        max_in_flight_samples_per_worker=2 * batch_size,
        rate_limiter_timeout_ms=wake_ms,
    )
    return dataset.batch(batch_size, drop_remainder=wake_ms < 0).prefetch(tf.data.AUTOTUNE)


def waking_batches(server_address: str, table: str, batch_size: int) -> Iterator[Any]:
    """`table`'s batches of exactly `batch_size` items, and None each time the rate limiter held the
    sampler `SAMPLER_WAKE_MS` (the dataset ends, a new one starts; a partial last batch joins the next)."""
    dataset = make_dataset(server_address, table, batch_size, SAMPLER_WAKE_MS)
    pending = None
    while True:
        for part in dataset.as_numpy_iterator():
            if pending is not None:
                part = tree.map_structure(lambda *parts: np.concatenate(parts), pending, part)
                pending = None
            if len(part.info.key) < batch_size:
                pending = part
                continue
            if len(part.info.key) > batch_size:
                pending = tree.map_structure(lambda column: column[batch_size:], part)
                part = tree.map_structure(lambda column: column[:batch_size], part)
            yield part
        yield None


class PrefetchingIterator(Iterator[ReplaySample]):
    """Pulls batches on a daemon thread, `decode`s them and hands them over as device arrays; none
    within `timeout_s` (None: no bound) raises a `ReplayTimeoutError` naming `source`."""

    def __init__(
        self,
        iterable: Any,
        decode: Callable[[Any], Any] | None = None,
        timeout_s: float | None = SAMPLE_TIMEOUT_S,
        source: str = "replay",
    ):
        self._source = iter(iterable)
        self._timeout_s = timeout_s
        self._source_name = source
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._decode = decode or (lambda data: data)
        self._stop = threading.Event()
        self._finished: BaseException | None = None
        self._thread = threading.Thread(target=self._fill, name="replay-prefetch", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            for sample in self._source:
                if self._stop.is_set():
                    return
                if sample is None:  # The source woke only to let a closed iterator's thread leave.
                    continue
                # Reverb's sample info starts with the key, probability and table size.
                batch = ReplaySample(*sample.info[:3], jax.device_put(self._decode(sample.data)))
                while not self._stop.is_set():
                    with contextlib.suppress(queue.Full):
                        self._queue.put(batch, timeout=0.1)
                        break
                if self._stop.is_set():
                    return
        except Exception as error:  # Raised in the learner, not a dead thread.
            self._queue.put(error)
            return
        self._queue.put(StopIteration())

    def __next__(self) -> ReplaySample:
        if self._finished is not None:
            raise self._finished
        try:
            item = self._queue.get(timeout=self._timeout_s)
        except queue.Empty:
            raise ReplayTimeoutError(
                f"{self._source_name}: no batch within {self._timeout_s:g} s (the server is gone or unreachable,"
                " or no actor inserts any more)"
            ) from None
        if isinstance(item, BaseException):
            self._finished = item
            raise item
        return item

    def close(self) -> None:
        """Stops prefetching and waits for the thread to leave; a consumer waiting in `next` gets StopIteration.
        Once the thread has left, a source generator is closed too, so its reverb sampler ends now, while the
        server is up, not in a later garbage collection after `server.stop()`, where it would wait on a server
        that is gone."""
        self._stop.set()
        self._finished = self._finished or StopIteration()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(StopIteration())
        self._thread.join(timeout=SAMPLER_WAKE_MS / 1000 + 1.0)
        if not self._thread.is_alive() and isinstance(self._source, types.GeneratorType):
            self._source.close()


def make_replay_iterator(
    server_address: str,
    table: str,
    batch_size: int,
    decode: Callable[[Any], Any] | None = None,
    timeout_s: float | None = SAMPLE_TIMEOUT_S,
) -> PrefetchingIterator:
    """Prefetched batches of `batch_size` items of `table`, decoded by `decode`."""
    source = f"replay server at {server_address}: sampling {batch_size} items from table {table!r}"
    batches = waking_batches(server_address, table, batch_size)
    return PrefetchingIterator(batches, decode=decode, timeout_s=timeout_s, source=source)


def learner_iterator(replay_client: Any, table: str, batch_size: int, decode: Any = None) -> Iterator[ReplaySample]:
    """The learner's batches of `table`, decoded: a `SeededReplay`'s, or prefetched from reverb."""
    if not isinstance(replay_client, SeededReplay):
        return make_replay_iterator(replay_client.server_address, table, batch_size, decode=decode)
    seeded = replay_client.table(table)

    def batches() -> Iterator[ReplaySample]:
        while True:
            keys, probabilities, sizes, columns = seeded.sample(batch_size)
            data = tree.unflatten_as(seeded.signature, columns)
            yield ReplaySample(keys, probabilities, sizes, jax.device_put(data if decode is None else decode(data)))

    return batches()
