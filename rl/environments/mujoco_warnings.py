"""MuJoCo's known, harmless warnings, dropped where a model is loaded.

MuJoCo reports warnings through one process-wide hook (`mujoco.set_mju_user_warning`):
by default it prints `WARNING: ...` on stdout and appends to `MUJOCO_LOG.TXT` in the
working directory; dm_control replaces the hook with one that logs through absl. Some
models shipped with the libraries we use trigger a warning on every load, e.g.
gymnasium's and dm_control's cheetah:

    WARNING: compiler attribute 'settotalmass' is deprecated and will be removed in a
    future release: ...

`known_warnings_dropped()` wraps a model load: it drops the messages in `KNOWN_WARNINGS`
and passes every other one on, to the hook that was installed (dm_control's) or, when
there is none, to stderr as MuJoCo's own `WARNING: ...` line. The previous hook is put
back afterwards, so warnings while stepping (unstable simulations) are untouched.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable, Iterator

# Prefixes of the messages dropped: deprecations inside third-party model files, which a
# user cannot act on.
KNOWN_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)

_LOCK = threading.RLock()


def _forward(previous: Callable[[str], None] | None) -> Callable[[str], None]:
    def hook(message: str) -> None:
        if message.startswith(KNOWN_WARNINGS):
            return
        if previous is not None:
            previous(message)
        else:
            print(f"WARNING: {message}", file=sys.stderr, flush=True)

    return hook


@contextlib.contextmanager
def known_warnings_dropped() -> Iterator[None]:
    """Within the block, MuJoCo's `KNOWN_WARNINGS` are dropped and others passed on."""
    import mujoco

    with _LOCK:  # One hook per process: loads on several threads take turns.
        previous = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(_forward(previous))
        try:
            yield
        finally:
            mujoco.set_mju_user_warning(previous)
