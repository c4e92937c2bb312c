"""The single-process learner thread: reverb's rate limiter, not Python, decides when the
learner may take a batch; checkpoints can pause it even while it waits for replay."""

import logging
import threading
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rl import core
from rl.experiments.builders import StepLockReleasingIterator
from rl.local.launcher import LearnerThread, batches_allowed
from rl.replay.server import ReplayRatio, make_error_buffer, make_replay_iterator, make_server

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

BATCH = 8


class CountingLearner(core.Learner):
    """Takes one batch per step from its replay iterator, as `SGDLearner` does."""

    def __init__(self, iterator, fail_at=None):
        self._iterator = iterator
        self.steps = 0
        self.fail_at = fail_at
        self.threads = set()

    def step(self):
        next(self._iterator)
        self.threads.add(threading.current_thread().name)
        self.steps += 1
        if self.steps == self.fail_at:
            raise FloatingPointError("loss is nan")

    def get_variables(self, names):
        return [None for _ in names]

    def save(self):
        return self.steps

    def restore(self, state):
        self.steps = state


@pytest.fixture
def replay():
    """A table limited by the replay ratio the builders make: 2 samples per insert, at
    least 20 items, `make_error_buffer`'s slack for a learner taking batches of 8."""
    ratio = ReplayRatio(2.0, 20, make_error_buffer(2.0, BATCH))
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10_000,
        ratio.make_rate_limiter(),
        signature=tf.TensorSpec([2], tf.float32),
    )
    server = make_server([table])
    client = reverb.Client(f"localhost:{server.port}")
    yield ratio, client
    server.stop()


def _insert(client, count):
    writer = client.trajectory_writer(num_keep_alive_refs=1)
    for _ in range(count):
        writer.append(np.zeros(2, np.float32))
        writer.create_item("t", 1.0, writer.history[-1])
    writer.end_episode(timeout_ms=60_000)
    writer.close()


class SlowIterator:
    """Replay whose batches take `delay` seconds to arrive once `slow` is set (a loaded machine)."""

    def __init__(self, iterator):
        self._iterator, self.slow, self.delay = iterator, threading.Event(), 1.0

    def __next__(self):
        if self.slow.is_set():
            time.sleep(self.delay)
        return next(self._iterator)

    def close(self):
        self._iterator.close()


def _threaded_learner(client, fail_at=None, iterator=None):
    lock = threading.Lock()
    iterator = iterator or make_replay_iterator(client.server_address, "t", BATCH)
    dataset = StepLockReleasingIterator(iterator, lock)
    learner = CountingLearner(dataset, fail_at)
    return learner, lock, LearnerThread(learner, lock, dataset, lambda: batches_allowed(client, "t", BATCH))


def test_the_learner_takes_exactly_the_batches_reverbs_rate_limiter_allows(replay):
    ratio, client = replay
    learner, _, thread = _threaded_learner(client)
    for _ in range(10):  # An actor inserting 10 items per step.
        _insert(client, 10)
        thread.notify()
    thread.finish()
    sampled = client.server_info()["t"].rate_limiter_info.sample_stats.completed
    ahead = make_error_buffer(2.0, BATCH)[0]
    assert sampled == ratio.target_samples(100) + ahead  # Reverb sampled all it allows, no more ...
    assert learner.steps == sampled // BATCH  # ... and the learner took every whole batch of it.
    assert learner.threads == {"learner"}


def test_a_slow_replay_still_hands_the_learner_every_batch_allowed(replay):
    """The drain counts batches: one that takes a second to arrive is still taken."""
    ratio, client = replay
    slow = SlowIterator(make_replay_iterator(client.server_address, "t", BATCH))
    learner, _, thread = _threaded_learner(client, iterator=slow)
    _insert(client, 100)
    slow.slow.set()
    thread.finish()
    sampled = client.server_info()["t"].rate_limiter_info.sample_stats.completed
    assert sampled == ratio.target_samples(100) + make_error_buffer(2.0, BATCH)[0]
    assert learner.steps == sampled // BATCH


def test_a_table_below_its_minimum_size_owes_the_learner_no_batch(replay, caplog):
    """A budget that ends before replay reaches its minimum size (e.g. `max_actor_steps=10
    agent.min_replay_size=10`, where n-step tails insert fewer items): the drain ends at once."""
    _, client = replay
    learner, _, thread = _threaded_learner(client)
    _insert(client, 19)  # One short of the table's 20.
    assert batches_allowed(client, "t", BATCH) == 0
    with caplog.at_level(logging.WARNING):
        thread.finish()
    assert learner.steps == 0 and "waited" not in caplog.text


def test_the_learner_waits_for_replay_without_holding_the_step_lock(replay):
    """Below the minimum size the learner waits in its dataset; a checkpoint (holding the
    step lock) can still be taken; `close` ends the wait at once."""
    _, client = replay
    learner, lock, thread = _threaded_learner(client)
    _insert(client, 5)
    time.sleep(0.5)
    assert lock.acquire(timeout=30)  # Not held by a learner waiting for data.
    lock.release()
    start = time.monotonic()
    thread.close()
    assert learner.steps == 0 and time.monotonic() - start < 30
    thread.notify()  # Stopping is not an error.


def test_a_learner_error_reaches_the_actor_thread(replay):
    _, client = replay
    _, _, thread = _threaded_learner(client, fail_at=3)
    _insert(client, 100)
    with pytest.raises(FloatingPointError, match="nan"):
        thread.finish()


def test_the_error_buffer_lets_samples_run_ahead_by_the_prefetched_batches_only():
    ahead, behind = make_error_buffer(2.0, 64)
    assert (ahead, behind) == (3 * 64, 3 * 64 + 256 * 2.0)
    ratio = ReplayRatio(2.0, 100, (ahead, behind))
    assert (ratio.min_diff, ratio.max_diff) == (200.0 - ahead, 200.0 + behind)
    # The one-thread schedule takes a batch whenever the learner is at or below the target.
    assert ratio.can_sample(inserts=100, samples=0) and not ratio.can_sample(inserts=100, samples=1)


def test_a_stopped_ray_learner_is_done_when_its_loop_ends_or_it_waits_on_a_batch_that_cannot_come():
    """rl/ray/nodes.py: `LearnerNode.stop` answers as soon as the learner cannot step
    again (its loop ended, or it waits on replay with the actors stopped), not after the stop timeout."""
    from rl.ray.nodes import BLOCKED_S, stepping_stopped

    release, lock = threading.Event(), threading.Lock()
    batches = StepLockReleasingIterator(iter(lambda: release.wait() and 0, 1), lock)  # Blocks until released.
    lock.acquire()
    waiter = threading.Thread(target=lambda: next(batches), daemon=True)
    waiter.start()
    ended = threading.Event()
    start = time.monotonic()
    assert stepping_stopped(ended, batches, timeout=30.0)
    assert BLOCKED_S < time.monotonic() - start < 10.0  # Answered on the wait, far within the timeout.
    release.set()
    waiter.join(timeout=10)
    assert batches.waiting_since is None
    assert not stepping_stopped(ended, batches, timeout=0.3)  # Stepping, not ended: not stopped.
    ended.set()
    assert stepping_stopped(ended, batches, timeout=30.0)
