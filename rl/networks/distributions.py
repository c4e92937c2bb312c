"""Action distributions for continuous-control policies (distrax)."""

from __future__ import annotations

from typing import NamedTuple

import distrax
import jax


class GaussianParams(NamedTuple):
    """A stochastic policy network's output: a diagonal Gaussian before the tanh squash."""

    loc: jax.Array
    scale: jax.Array


def tanh_normal(loc: jax.Array, scale: jax.Array) -> distrax.Distribution:
    """A diagonal Gaussian squashed into [-1, 1] by tanh, one event over the last axis.

    distrax computes log-probabilities of its own samples from the pre-tanh value, which
    stays finite even where tanh saturates.
    """
    base = distrax.MultivariateNormalDiag(loc=loc, scale_diag=scale)
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))
