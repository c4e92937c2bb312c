"""A persistent cache of compiled XLA programs, shared by every run on a machine.

A learner update or a policy takes a second or more to compile on a small CPU; sweeps,
seeds and tests compile the same programs again and again. JAX can keep them on disk,
keyed by the program and its shapes, so only the first run pays.
"""

from __future__ import annotations

import os

# Programs that compile faster than this are cheaper to rebuild than to read back.
MIN_COMPILE_TIME_S = 0.1


def enable_compilation_cache(directory: str | None) -> None:
    """Points JAX's persistent compilation cache at `directory` (None leaves it off)."""
    if not directory:
        return
    import jax

    path = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    # JAX decides at a process's first compilation whether the cache is used and keeps
    # that answer; code that compiled before this call (gymnax's MinAtar constructors,
    # an earlier test) would leave it off. Forgetting the answer makes the next
    # compilation ask again, with the directory now set.
    from jax.experimental.compilation_cache import compilation_cache

    compilation_cache.reset_cache()
