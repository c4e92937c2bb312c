"""Stop signals answered the moment they arrive. Python runs a signal handler only once the main thread is back
in Python, and a wait on a device (an update, a compilation) can hold that off for minutes; so a thread of its own
reads each signal's number from `signal.set_wakeup_fd` (written by Python's C handler, in the signal's context)
and answers at once: a first SIGINT or SIGTERM is announced in one line (what the run finishes first, where its
checkpoint will be), a second (not the first sent twice at once: `signals.REPEAT_S`) says what is lost and ends
the process within `GRACE_S` seconds, its own way if the main thread gets there (rl/train.py), else from here. The handlers (rl/experiments/signals.py) still decide what
the run does; this only speaks and, on a second signal, ends a process its main thread cannot."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

from rl.experiments import signals

# How long a second signal leaves the main thread to end the process itself (its loggers closed, W&B's run ended)
# before the process ends without it: a main thread held in a wait on a device never gets there.
GRACE_S = 3.0

# A line for a signal, from its number: what the run in progress says (`tell`).
Line = Callable[[int], str]


def before_a_run(signum: int) -> str:
    return f"stopping on {signals.signal_name(signum)}: the run has not started training; it ends before it does"


def ending_outside_a_run(signum: int) -> str:
    return f"second {signals.signal_name(signum)}: ending the process now"


class SignalWatcher:
    """The process's watcher (`watch_signals` starts it): counts SIGINT and SIGTERM (and a submitit job's requeue
    signal, which never counts as a second) as the handlers do, says `first`'s line on the first and `second`'s on
    a second, through `say`."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.first: Line = before_a_run
        self.second: Line = ending_outside_a_run
        self.signum: int | None = None  # The first signal, once it came,
        self.first_at: float | None = None  # and when (time.monotonic()).
        read, write = os.pipe()
        os.set_blocking(write, False)  # Python's C handler must never block on it.
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._watch, args=(read,), name="signal watcher", daemon=True)
        self.thread.start()

    def _watch(self, read: int) -> None:
        while True:
            for signum in os.read(read, 64):  # Blocks (without the GIL) until a signal's byte comes.
                self.answer(signum)

    def answer(self, signum: int) -> None:
        requeue = signals.requeue_signal()
        if signum not in signals.SIGNALS and signum != requeue:
            return
        if self.signum is None:
            self.signum, self.first_at = signum, time.monotonic()
            self.tell_user(self.line(self.first, signum, f"stopping on {signals.signal_name(signum)}"))
            return
        if signum == requeue:  # It turns the stop under way into one that requeues the job; nothing to add.
            return
        if signals.repeated(self.first_at):  # The first one sent twice (`timeout` sends it to a process group).
            return
        signals.mark_ending()
        self.tell_user(self.line(self.second, signum, f"second {signals.signal_name(signum)}: ending the process now"))
        signals.ENDING_SAID.set()
        time.sleep(GRACE_S)  # The main thread ends the process itself where it can (rl/train.py).
        signals.end_process(128 + signum)

    def tell_user(self, line: str) -> None:
        """Says `line`; a failure to (a closed terminal) must not keep a second signal from ending the process."""
        try:
            self.say(line)
        except Exception:  # noqa: BLE001 - nowhere to say it.
            pass

    @staticmethod
    def line(line: Line, signum: int, fallback: str) -> str:
        """`line(signum)`, or `fallback` where it fails: the answer must not depend on the run's state being
        readable from this thread."""
        try:
            return line(signum)
        except Exception:  # noqa: BLE001 - any failure: the plain line.
            return fallback


_WATCHER: SignalWatcher | None = None


def watch_signals(say: Callable[[str], None]) -> None:
    """Starts the process's watcher, saying its lines through `say`; once per process, from the main thread only
    (elsewhere `signal.set_wakeup_fd` is refused: the signals are then answered when their handlers run)."""
    global _WATCHER
    if _WATCHER is None and threading.current_thread() is threading.main_thread():
        _WATCHER = SignalWatcher(say)
        signals.WATCHED.set()
        sys.unraisablehook = functools.partial(quiet_about_signals, sys.unraisablehook)
        os.register_at_fork(after_in_child=forget_in_a_forked_child)


def forget_in_a_forked_child() -> None:
    """A forked child keeps its parent's wakeup descriptor: its own signals (a Ctrl-C reaches the whole process
    group) would be counted by the parent's watcher as the parent's. The child has no watcher."""
    global _WATCHER
    _WATCHER = None
    signals.WATCHED.clear()
    signal.set_wakeup_fd(-1)


def quiet_about_signals(hook: Callable[[Any], None], unraisable: Any) -> None:
    """`hook`, but for a signal's exception raised where Python calls back from C (jax's garbage collector
    callback) and dropped there: the watcher has said what the signal does, and a second one ends the process
    from here if the main thread does not (rl/experiments/signals.py, `RaiseInterrupted`)."""
    if not isinstance(unraisable.exc_value, signals.Interrupted):
        hook(unraisable)


def tell(first: Line, second: Line) -> None:
    """What the watcher says from now on, on a first signal and on a second (the run in progress sets them: it
    knows what is in flight and what its last checkpoint holds). Nothing without a watcher."""
    if _WATCHER is not None:
        _WATCHER.first, _WATCHER.second = first, second
