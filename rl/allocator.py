"""Runs the entry points under jemalloc (Ray's bundled one, else the system's) instead of glibc's
malloc (docs/performance.md, "Allocator"). `RL_ALLOCATOR`: `auto` (default), `jemalloc` (or a
one-line error), `system`. `python -m rl.allocator` prints the `LD_PRELOAD` to start with."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import sys

MODE = "RL_ALLOCATOR"
MODES = ("auto", "jemalloc", "system")
MARKER = "RL_ALLOCATOR_REEXEC"
# Where distributions put the system's jemalloc (Debian/Ubuntu multiarch, Fedora, Arch, /usr/local).
SYSTEM_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
    "/usr/local/lib/libjemalloc.so.2",
)


class AllocatorError(SystemExit):
    """RL_ALLOCATOR names no allocator, or requires jemalloc and none was found: a one-line exit."""


def find_jemalloc() -> str | None:
    """Ray's bundled jemalloc, else the system's; None without one (or without LD_PRELOAD)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        spec = importlib.util.find_spec("ray")  # Locates the package; imports nothing.
    except (ImportError, ValueError):
        spec = None
    ray = [os.path.join(p, "core", "libjemalloc.so") for p in (spec and spec.submodule_search_locations) or []]
    return next(filter(os.path.isfile, (*ray, *SYSTEM_PATHS)), None) or ctypes.util.find_library("jemalloc")


def allocator_mode() -> str:
    mode = os.environ.get(MODE, "").strip().lower() or "auto"
    if mode not in MODES:
        raise AllocatorError(f"{MODE}={os.environ[MODE]!r}: must be one of {', '.join(MODES)}")
    return mode


def wanted_preload() -> str | None:
    """LD_PRELOAD with jemalloc prepended; None when nothing is to change."""
    mode = allocator_mode()
    current = os.environ.get("LD_PRELOAD", "")
    if mode == "system" or any("jemalloc" in os.path.basename(e) for e in current.replace(" ", ":").split(":")):
        return None
    library = find_jemalloc()
    if library is None and mode == "jemalloc":
        raise AllocatorError(
            f"{MODE}=jemalloc: no jemalloc library found (Ray's ray/core/libjemalloc.so or the system's "
            f"libjemalloc.so.2: apt-get install libjemalloc2); {MODE}=system uses glibc's malloc"
        )
    return None if library is None else ":".join(filter(None, (library, current)))


def jemalloc_loaded() -> str | None:
    """The jemalloc library mapped into this process (from /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6]
    except OSError:
        return None
    return next((path for path in paths if "jemalloc" in os.path.basename(path)), None)


def reexec_with_jemalloc() -> None:
    """Replaces this process by the same command (`sys.orig_argv`) under jemalloc, once, before the heavy
    imports. A one-line exit when RL_ALLOCATOR is invalid or its jemalloc missing; a failed exec warns."""
    mode = allocator_mode()
    if os.environ.get(MARKER):  # Re-executed already: never again.
        if mode == "jemalloc" and jemalloc_loaded() is None:
            raise AllocatorError(f"{MODE}=jemalloc: {os.environ[MARKER]} was preloaded but is not loaded")
        return
    # sys.ps1 exists only in an interactive interpreter.
    interactive = sys.flags.interactive or hasattr(sys, "ps1") or "IPython" in sys.modules
    preload = None if interactive or sys.argv[0] in ("", "-") or not sys.executable else wanted_preload()
    if preload is None:
        return
    environment = {**os.environ, "LD_PRELOAD": preload, MARKER: preload.split(":")[0]}
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, environment)
    except OSError as error:  # This process, and its children, carry on without jemalloc.
        failure = f"could not re-execute {sys.executable} under jemalloc: {error}"
        if mode == "jemalloc":
            raise AllocatorError(f"{MODE}=jemalloc: {failure}") from None
        print(f"rl.allocator: {failure}; using the system allocator", file=sys.stderr)


if __name__ == "__main__":
    print(wanted_preload() or os.environ.get("LD_PRELOAD", ""))
