"""Stopping a run by signal: SIGINT/SIGTERM (and a submitit job's requeue signal) request a clean stop
(`StopRequest`), a second one ends the process (`Interrupted`, then `end_process`); `wait_for` keeps signal
handlers running while a device computes. rl/experiments/signal_watcher.py answers both the moment they arrive."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)

# A signal again within this many seconds of the first is that one sent twice, not a second: `timeout` sends its
# signal to the command and then to the command's process group, and a process with many threads takes both.
REPEAT_S = 0.5


def repeated(first_at: float | None) -> bool:
    """A signal now, after a first one at `first_at` (time.monotonic()), is the first sent again."""
    return first_at is not None and time.monotonic() - first_at < REPEAT_S


def requeue_signal() -> int | None:
    """The signal submitit sends a job before its time limit or a pre-emption (SIGUSR2 unless
    SUBMITIT_PREEMPT_SIGNAL names another); None outside a submitit job."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    # The signals this platform has, by name; submitit names its signal in the environment.
    return signal.Signals.__members__.get("SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class Interrupted(KeyboardInterrupt):
    """A signal that ends the process now; `exit_code` is 128 + its number."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum
        self.exit_code = 128 + signum


class RunInterrupted(Exception):
    """A run stopped cleanly on a signal: checkpoint and summary written, loggers closed."""

    def __init__(self, signum: int, summary: Any, checkpoint: str | None):
        self.signum = signum
        self.exit_code = 128 + signum
        self.summary = summary
        self.checkpoint = checkpoint
        saved = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint written"
        super().__init__(f"stopped by {signal_name(signum)} at {summary.actor_steps} actor steps; {saved}")


def _set_handlers(handler: Any, signals: tuple[int, ...] = SIGNALS) -> contextlib.ExitStack:
    """Sets `handler` for `signals` (main thread only); closing the stack returned puts the old ones back."""
    stack = contextlib.ExitStack()
    if threading.current_thread() is threading.main_thread():
        for signum in signals:
            stack.callback(signal.signal, signum, signal.signal(signum, handler))
    return stack


class StopRequest:
    """SIGINT and SIGTERM (and a submitit job's requeue signal) set `signum` until `restore()`; a
    second SIGINT or SIGTERM raises `Interrupted` (not one within `REPEAT_S` of the first: the same signal sent
    twice). The requeue signal never cuts a clean stop short:
    it turns a stop already under way into one that requeues the job. A signal `raise_on_signals`
    raised for and something swallowed is a stop already requested."""

    def __init__(self) -> None:
        handler = signal.getsignal(signal.SIGINT)  # The process's handler: `raise_on_signals`', while it is open.
        taken = isinstance(handler, RaiseInterrupted)
        self.signum: int | None = handler.take_raised() if taken else None
        self.first_at: float | None = handler.raised_at if taken and self.signum is not None else None
        self.requeue = requeue_signal()
        self.restore = _set_handlers(self._handle, SIGNALS + ((self.requeue,) if self.requeue else ())).close

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum != self.requeue:
            if repeated(self.first_at):
                return
            mark_ending()  # A second signal: stop now.
            raise Interrupted(signum)
        self.signum, self.first_at = signum, time.monotonic()


# Set by a second signal (its handler, or the watcher: rl/experiments/signal_watcher.py): the process ends now.
_ENDING = threading.Event()
# Set while a signal watcher runs, and once it has said what a second signal loses.
WATCHED = threading.Event()
ENDING_SAID = threading.Event()


def mark_ending() -> None:
    _ENDING.set()


def ending_now() -> bool:
    """A second signal came: the process ends without waiting for anything (`end_process`)."""
    return _ENDING.is_set()


def end_process(code: int) -> None:
    """Ends the process with `code` at once, its output and logs flushed: Python's own exit would wait for the
    device work in flight (XLA's thread pools are joined as its client is destroyed; minutes on a CPU). The run's
    CSV rows are flushed as they are written; a W&B run not finished yet ends as crashed. After a second signal,
    the watcher's line saying what is lost comes first."""
    if ending_now() and WATCHED.is_set():
        ENDING_SAID.wait(timeout=2.0)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class RaiseInterrupted:
    """The signal handler of `raise_on_signals`: raises `Interrupted`, and keeps the signals it raised for
    until a `StopRequest` takes them: an exception raised where Python calls back from C (a garbage collector
    callback such as jax's, a finalizer) is printed and swallowed."""

    def __init__(self) -> None:
        self.raised: list[int] = []
        self.raised_at: float | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if repeated(self.raised_at):  # The signal just raised for, sent twice: raised once.
            return
        self.raised.append(signum)
        self.raised_at = time.monotonic()
        raise Interrupted(signum)

    def take_raised(self) -> int | None:
        """The last signal raised for, if any (a stop already requested); forgotten once taken."""
        last = self.raised[-1] if self.raised else None
        self.raised.clear()
        return last


def raise_on_signals() -> contextlib.ExitStack:
    """While open, SIGINT and SIGTERM raise `Interrupted` in the main thread; one that was swallowed makes
    the next `StopRequest` a stop requested (`RaiseInterrupted`). Each opening starts with none raised."""
    return _set_handlers(RaiseInterrupted())


class Stopped(Exception):
    """A wait gave up on a stop request (see `wait_for`)."""


# `wait_for` runs each work in a thread of this name prefix; one still alive after its wait is work given up on.
WORK_THREAD_PREFIX = "rl: "


def left_running() -> list[str]:
    """The works waits gave up on that still run (XLA cannot cancel a computation): the process ends without
    waiting for them."""
    threads = threading.enumerate()  # The live threads only.
    return [
        thread.name.removeprefix(WORK_THREAD_PREFIX) for thread in threads if thread.name.startswith(WORK_THREAD_PREFIX)
    ]


def wait_for(work: Callable[[], Any], stopping: Callable[[], bool], what: str, poll_s: float = 0.05) -> Any:
    """`work()`'s result, computed in a helper thread while this one waits in Python, where signal handlers
    run: a wait on a device (a C++ wait) would hold them off. Raises `Stopped` when `stopping()` (asked every
    `poll_s`; before starting too), and whatever a second signal's handler raises, leaving `work` to run on
    (named `what` in `left_running()`)."""
    if stopping():
        raise Stopped(what)
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # noqa: BLE001 - raised again in the waiting thread.
            outcome["error"] = error
        finally:
            done.set()

    worker = threading.Thread(target=target, name=WORK_THREAD_PREFIX + what, daemon=True)
    worker.start()
    while not done.wait(poll_s):
        if stopping():
            raise Stopped(what)
    worker.join()  # Done: only the work of a wait given up on keeps its thread alive (`left_running`).
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
