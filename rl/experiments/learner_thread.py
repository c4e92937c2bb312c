"""Steps a learner on its own thread, at the replay ratio, beside a single-process actor.

In one process the actor and the learner can still run side by side: the learner's
update (XLA) and reverb's sampling release the GIL, so on two cores acting overlaps
learning. The learner takes a batch only when the table's `ReplayRatio` allows it, the
same rule the one-thread loop uses, so the number of learner steps at any actor step is
the same as there; only which actor step a given update sees changes with thread timing.
"""

from __future__ import annotations

import threading
from typing import Callable

from rl import core
from rl.replay.tables import ReplayRatio


class LearnerThread:
    """Runs `learner.step()` whenever `ratio.can_sample(inserts(), samples)` holds.

    The actor calls `notify()` after each step (inserts changed). `finish()` lets the
    learner take every batch the final inserts allow, then joins. An exception raised by
    the learner is re-raised in the actor's thread at its next `notify()` or `finish()`.
    """

    def __init__(self, learner: core.Learner, ratio: ReplayRatio, batch: int, inserts: Callable[[], int]):
        self._learner = learner
        self._ratio = ratio
        self._batch = batch
        self._inserts = inserts
        self.samples = 0
        self._wake = threading.Condition()
        self._acting = True
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="learner", daemon=True)
        self._thread.start()

    def _can_step(self) -> bool:
        return self._ratio.can_sample(self._inserts(), self.samples)

    def _run(self) -> None:
        try:
            while True:
                with self._wake:
                    while self._acting and not self._closed and not self._can_step():
                        self._wake.wait(timeout=0.1)
                    if self._closed or (not self._acting and not self._can_step()):
                        return
                self._learner.step()
                self.samples += self._batch
        except BaseException as error:  # noqa: BLE001 - handed to the actor's thread.
            self._error = error

    def _raise_learner_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def notify(self) -> None:
        self._raise_learner_error()
        with self._wake:
            self._wake.notify()

    def finish(self) -> None:
        with self._wake:
            self._acting = False
            self._wake.notify()
        self._thread.join()
        self._raise_learner_error()

    def close(self) -> None:
        """Stops after the current update without draining (the run is being abandoned)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
