"""Steps a learner on its own thread beside a single-process actor. XLA and reverb's
sampling release the GIL, so acting overlaps learning; the table's rate limiter alone
decides when the learner may learn, as for a distributed learner.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rl import core


class StepLockReleasingIterator:
    """A learner's replay iterator that releases `lock` while it waits for a batch.

    The learner holds `lock` during each step, so holding it from elsewhere pauses
    learning between two steps (a checkpoint of a consistent state). A learner waiting
    for replay (the rate limiter wants more inserts, or actors have stopped) must not
    keep it: whoever would insert may be the one waiting for the lock.
    """

    def __init__(self, iterator: Any, lock: threading.Lock):
        self._iterator = iterator
        self._lock = lock
        self.waiting_since: float | None = None  # When the wait for the current batch began.

    def __iter__(self) -> "StepLockReleasingIterator":
        return self

    def __next__(self) -> Any:
        self._lock.release()
        self.waiting_since = time.monotonic()
        try:
            return next(self._iterator)
        finally:
            self.waiting_since = None
            self._lock.acquire()

    def __getattr__(self, name: str) -> Any:  # close() and the like reach the real iterator.
        return getattr(self._iterator, name)


# After the actor's last inserts, the learner takes batches until it has waited this
# long for the next one: reverb's rate limiter refuses it (a batch reverb has sampled
# reaches the learner within milliseconds).
DRAIN_IDLE_S = 0.5


class LearnerThread:
    """Runs `learner.step()` under `lock` over and over, each step waiting in the
    learner's `dataset` (a `StepLockReleasingIterator`) for a batch reverb lets it sample.

    `notify()` (the actor calls it after each step) re-raises an error the learner
    raised, in the actor's thread. `finish()`, once the actor's last inserts are in,
    lets the learner take the batches they allow (until it has waited `DRAIN_IDLE_S`
    for one), then stops it; `close()` stops it after its current step. Both close the
    dataset, so a step waiting for a batch ends at once.
    """

    def __init__(self, learner: core.Learner, lock: threading.Lock, dataset: Any):
        self._learner = learner
        self._lock = lock
        self._dataset = dataset
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="learner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._lock:
                    self._learner.step()
        except StopIteration:
            if not self._stopping.is_set():
                self._error = RuntimeError("the learner's replay dataset ended while the run was acting")
        except BaseException as error:  # noqa: BLE001 - handed to the actor's thread.
            self._error = error

    def _raise_learner_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def notify(self) -> None:
        self._raise_learner_error()

    def finish(self) -> None:
        """Takes the batches the final inserts allow, stops, re-raises a learner error."""
        while self._thread.is_alive() and self._dataset is not None:
            since = self._dataset.waiting_since
            if since is not None and time.monotonic() - since >= DRAIN_IDLE_S:
                break
            time.sleep(0.01)
        self.close()
        self._raise_learner_error()

    def close(self) -> None:
        """Stops after the current step; waits for the thread."""
        self._stopping.set()
        close = getattr(self._dataset, "close", None)
        if close is not None:
            close()
        self._thread.join()
