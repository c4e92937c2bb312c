"""SIGINT and SIGTERM stop a run cleanly: the first becomes a request the lifecycle polls
(checkpoint, "interrupted" summary, `RunInterrupted`), a second raises `Interrupted` at
once; `raise_on_signals()` raises it for SIGTERM as Python does for SIGINT, so every
`finally` runs. The exit code is 128 + the signal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator

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
        at = f" at {summary.actor_steps} actor steps" if summary is not None else ""
        saved = f"; checkpoint {checkpoint}" if checkpoint else "; no checkpoint written"
        super().__init__(f"stopped by {signal_name(signum)}{at}{saved}")


class StopRequest:
    """SIGINT and SIGTERM set `signum` (a second one raises `Interrupted`) until `restore()`
    puts the previous handlers back."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.restore = _set_handlers(self._handle)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # A second signal: stop now.
            raise Interrupted(signum)
        self.signum = signum


def _set_handlers(handler: Any) -> Callable[[], None]:
    """Sets `handler` for SIGINT and SIGTERM; returns what puts the previous ones back.
    Only the main thread may set handlers: elsewhere they are left be."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def raise_on_signals() -> Iterator[None]:
    """While open, SIGINT and SIGTERM raise `Interrupted` in the main thread."""
    restore = _set_handlers(_raise)
    try:
        yield
    finally:
        restore()
