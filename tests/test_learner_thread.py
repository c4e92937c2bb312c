"""The single-process learner thread keeps the replay ratio's count of learner steps."""

import threading

import pytest

from rl import core
from rl.experiments.learner_thread import LearnerThread
from rl.replay.tables import ReplayRatio


class CountingLearner(core.Learner):
    def __init__(self, fail_at=None):
        self.steps = 0
        self.fail_at = fail_at
        self.threads = set()

    def step(self):
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


def one_thread_steps(ratio, batch, inserts_per_step, actor_steps):
    """The deterministic loop's rule: after each actor step, every batch the ratio allows."""
    inserts = samples = steps = 0
    for _ in range(actor_steps):
        inserts += inserts_per_step
        while ratio.can_sample(inserts, samples):
            samples += batch
            steps += 1
    return steps


@pytest.mark.parametrize("samples_per_insert,batch", [(16.0, 64), (64.0, 128), (0.5, 32)])
def test_learner_steps_match_the_one_thread_order(samples_per_insert, batch):
    ratio = ReplayRatio(samples_per_insert, min_size_to_sample=100, error_buffer=10 * batch)
    learner = CountingLearner()
    inserts = [0]
    thread = LearnerThread(learner, ratio, batch, lambda: inserts[0])
    for _ in range(700):
        inserts[0] += 3  # A vector of 3 copies.
        thread.notify()
    thread.finish()
    assert learner.steps == one_thread_steps(ratio, batch, 3, 700)
    assert learner.steps > 0 and learner.threads == {"learner"}
    assert thread.samples == learner.steps * batch


def test_a_learner_error_reaches_the_actor_thread():
    ratio = ReplayRatio(1.0, min_size_to_sample=1, error_buffer=100)
    thread = LearnerThread(CountingLearner(fail_at=5), ratio, 1, lambda: 1_000)
    with pytest.raises(FloatingPointError, match="nan"):
        thread.finish()
