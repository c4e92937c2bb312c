"""What an anakin run does to run faster on a CPU: XLA uses its faster CPU runtime for
these programs.

(TensorFlow stays out of an anakin run by itself: none of the agent modules it imports
uses rlax, whose distrax and TensorFlow Probability imports would pull it in;
tests/test_anakin.py checks that.)
"""

from __future__ import annotations

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
