"""What an anakin run does to start sooner and run faster on a CPU: TensorFlow is kept
out of its imports, and XLA uses its faster CPU runtime for these programs.

The agents' losses use rlax, which imports distrax, which imports TensorFlow
Probability's JAX substrate; that substrate tries `import tensorflow` only to copy
TensorFlow's docstrings onto its own functions (tensorflow_probability/python/internal/
backend/jax/_utils.py: without TensorFlow it sets `can_copy_docstring = False` and
works the same). Importing TensorFlow costs 3-4 s of a CartPole run that takes
15 s; nothing in launcher=anakin uses it (no reverb, no tf.data). So the agent modules
are imported with `tensorflow` hidden. Once the imports are done TensorFlow imports
normally again (a reverb run in the same process, a test), and when it was imported
before, nothing changes.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


@contextlib.contextmanager
def without_tensorflow() -> Iterator[None]:
    """Inside this block TensorFlow looks absent, as if it were not installed: `import
    tensorflow` raises ModuleNotFoundError and `importlib.util.find_spec("tensorflow")`
    is None (a `None` entry in `sys.modules`, Python's own way of blocking an import).
    Nothing changes when TensorFlow is already imported."""
    if "tensorflow" in sys.modules:
        yield
        return
    sys.modules["tensorflow"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("tensorflow", 0) is None:
            del sys.modules["tensorflow"]


# XLA's CPU "thunk" runtime (the default from jaxlib 0.4.32) runs every operation of a
# program as a separate task; the programs of launcher=anakin are long `lax.scan`s of
# small operations (a few copies of CartPole, 64-unit layers), for which the previous
# runtime, which compiles the whole loop body into one function, is 20-40% faster on
# this 2-core machine (DQN CartPole chunks: about 3,300 -> 4,200 steps/s; docs/anakin.md).
# jaxlib 0.4.34 still has it behind this flag.
CPU_XLA_FLAGS = "--xla_cpu_use_thunk_runtime=false"


def prefer_fast_cpu_runtime() -> bool:
    """Sets XLA_FLAGS to CPU_XLA_FLAGS when the user has not set XLA_FLAGS and JAX has
    not started its backends yet (XLA reads the variable once, when the first backend
    starts); returns whether it did. A user's XLA_FLAGS, even an empty one, is left as
    it is."""
    import os

    if "XLA_FLAGS" in os.environ:
        return False
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return False
    os.environ["XLA_FLAGS"] = CPU_XLA_FLAGS
    return True
