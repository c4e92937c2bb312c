"""Action distributions for continuous-control policies (distrax).

distrax is imported where a distribution is built, not with this module: it loads
TensorFlow Probability's JAX substrate, about 3 s that runs which never build one
(every discrete-action run, a configuration error) should not pay, and it is imported
without TensorFlow (rl/lazy_tensorflow.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax

from rl.lazy_tensorflow import import_without_tensorflow

if TYPE_CHECKING:
    import distrax


class GaussianParams(NamedTuple):
    """A stochastic policy network's output: a diagonal Gaussian before the tanh squash."""

    loc: jax.Array
    scale: jax.Array


def tanh_normal(loc: jax.Array, scale: jax.Array) -> distrax.Distribution:
    """A diagonal Gaussian squashed into [-1, 1] by tanh, one event over the last axis.

    distrax computes log-probabilities of its own samples from the pre-tanh value, which
    stays finite even where tanh saturates.
    """
    distrax = import_without_tensorflow("distrax")  # Not all of TensorFlow (rl/lazy_tensorflow.py).
    base = distrax.MultivariateNormalDiag(loc=loc, scale_diag=scale)
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))
