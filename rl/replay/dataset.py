"""Reading batches out of reverb: a TrajectoryDataset and a thread that makes device arrays
while the learner computes."""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, Callable, Iterator, NamedTuple

import jax
import numpy as np
import reverb

from rl.replay.adders import ReplayTimeoutError

# The learner's wait for one batch before it reports replay as stuck (beyond a replay node's restart).
SAMPLE_TIMEOUT_S = 600.0


class ReplaySample(NamedTuple):
    """A batch of items: their data (a Transition of arrays) and reverb's sample info."""

    keys: np.ndarray
    probabilities: np.ndarray
    table_size: np.ndarray
    data: Any


def make_dataset(server_address: str, table: str, batch_size: int, num_parallel_calls: int = 1) -> Any:
    """Batches of `batch_size` items of `table` (`num_parallel_calls > 1`: an interleave, twice the CPU per item)."""
    import tensorflow as tf

    def make_one(_: Any = None) -> tf.data.Dataset:
        return reverb.TrajectoryDataset.from_table_signature(
            server_address=server_address, table=table, max_in_flight_samples_per_worker=2 * batch_size
        )

    if num_parallel_calls == 1:
        dataset = make_one()
    else:
        dataset = tf.data.Dataset.range(num_parallel_calls).interleave(
            make_one, cycle_length=num_parallel_calls, num_parallel_calls=num_parallel_calls, deterministic=False
        )
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


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
                info = sample.info
                batch = ReplaySample(
                    info.key, info.probability, info.table_size, jax.device_put(self._decode(sample.data))
                )
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
        """Stops prefetching; a consumer waiting in `next` gets StopIteration."""
        self._stop.set()
        self._finished = self._finished or StopIteration()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(StopIteration())


def make_replay_iterator(
    server_address: str,
    table: str,
    batch_size: int,
    decode: Callable[[Any], Any] | None = None,
    timeout_s: float | None = SAMPLE_TIMEOUT_S,
) -> PrefetchingIterator:
    """Prefetched batches of `batch_size` items of `table`, decoded by `decode`."""
    dataset = make_dataset(server_address, table, batch_size)
    source = f"replay server at {server_address}: sampling {batch_size} items from table {table!r}"
    return PrefetchingIterator(dataset.as_numpy_iterator(), decode=decode, timeout_s=timeout_s, source=source)
