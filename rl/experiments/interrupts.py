"""SIGINT and SIGTERM stop a run cleanly. `install_stop_requests()` turns the first signal
into a request the lifecycle polls (checkpoint, "interrupted" summary, `RunInterrupted`); a
second raises `Interrupted` at once. `raise_on_signals()` raises `Interrupted` for SIGTERM as
Python does for SIGINT, so every `finally` runs; the exit code is 128 + the signal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """A signal that ends the process now; `exit_code` is 128 + its number."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal_name(signum))
        self.signum = signum
        self.exit_code = 128 + signum


class RunInterrupted(Exception):
    """A run stopped cleanly on a signal: checkpoint and summary written, loggers closed."""

    def __init__(self, signum: int, summary: Any = None, checkpoint: str | None = None):
        self.signum = signum
        self.exit_code = 128 + signum
        self.summary = summary
        self.checkpoint = checkpoint
        steps = getattr(summary, "actor_steps", None)
        at = f" at {steps} actor steps" if steps is not None else ""
        saved = f"; checkpoint {checkpoint}" if checkpoint else "; no checkpoint written"
        super().__init__(f"stopped by {signal_name(signum)}{at}{saved}")


class StopRequest:
    """The first signal received while installed (None until then)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        if self.signum is not None:  # A second signal: stop now.
            raise Interrupted(signum)
        self.signum = signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _handlers(handler: Any) -> Iterator[None]:
    if not _in_main_thread():  # Only the main thread may set handlers; leave them be.
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """While open, SIGINT and SIGTERM set the returned request (a second one raises)."""
    request = StopRequest()
    with _handlers(request._handle):
        yield request


def install_stop_requests() -> tuple[StopRequest, Any]:
    """`stop_requests()` without a `with` block: the request and the function that puts
    the previous handlers back."""
    context = stop_requests()
    request = context.__enter__()
    return request, lambda: context.__exit__(None, None, None)


def _raise(signum: int, frame: Any) -> None:
    del frame
    raise Interrupted(signum)


@contextlib.contextmanager
def raise_on_signals() -> Iterator[None]:
    """While open, SIGINT and SIGTERM raise `Interrupted` in the main thread."""
    with _handlers(_raise):
        yield
