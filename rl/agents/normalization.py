"""Running observation statistics, for agents that normalise what their networks see.

The learner owns the statistics: it folds in each batch's observations before training
on it and serves them with the policy's parameters, so actors, evaluators and the
learner all normalise with the same numbers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import tree

from rl.networks.base import zeros_like_spec


class RunningStatistics(NamedTuple):
    """Mean and variance per observation element over `count` observations so far."""

    count: jax.Array
    mean: Any
    variance: Any


def init_statistics(observation_spec: Any) -> RunningStatistics:
    """No observations yet: mean 0 and variance 1 (normalising is then the identity)."""
    zeros = tree.map_structure(lambda x: np.asarray(x, np.float32), zeros_like_spec(observation_spec, None))
    return RunningStatistics(
        count=jnp.zeros((), jnp.float32),
        mean=jax.tree_util.tree_map(jnp.asarray, zeros),
        variance=jax.tree_util.tree_map(lambda x: jnp.ones_like(x), zeros),
    )


def update_statistics(statistics: RunningStatistics, observations: Any, mask: jax.Array) -> RunningStatistics:
    """Folds in the observations whose `mask` is 1 (`mask` has their leading axes).

    With n_a, mean_a, var_a so far and n_b, mean_b, var_b of the new observations
    (Chan et al.'s parallel update), delta = mean_b - mean_a and n = n_a + n_b:

        mean = mean_a + delta * n_b / n
        var  = (n_a * var_a + n_b * var_b + delta^2 * n_a * n_b / n) / n
    """
    count_b = jnp.sum(mask)
    total = statistics.count + count_b
    safe_total = jnp.maximum(total, 1.0)

    def merge(mean_a: jax.Array, variance_a: jax.Array, values: jax.Array) -> tuple[jax.Array, jax.Array]:
        weights = jnp.reshape(mask, mask.shape + (1,) * (values.ndim - mask.ndim))
        values = values.astype(jnp.float32)
        axes = tuple(range(mask.ndim))
        mean_b = jnp.sum(weights * values, axis=axes) / jnp.maximum(count_b, 1.0)
        variance_b = jnp.sum(weights * jnp.square(values - mean_b), axis=axes) / jnp.maximum(count_b, 1.0)
        delta = mean_b - mean_a
        mean = mean_a + delta * count_b / safe_total
        variance = (
            statistics.count * variance_a
            + count_b * variance_b
            + jnp.square(delta) * statistics.count * count_b / safe_total
        ) / safe_total
        # Before any observation keep the identity (mean 0, variance 1).
        return jnp.where(total > 0, mean, mean_a), jnp.where(total > 0, variance, variance_a)

    merged = jax.tree_util.tree_map(merge, statistics.mean, statistics.variance, observations)
    treedef = jax.tree_util.tree_structure(statistics.mean)
    pairs = treedef.flatten_up_to(merged)
    return RunningStatistics(
        count=total,
        mean=jax.tree_util.tree_unflatten(treedef, [pair[0] for pair in pairs]),
        variance=jax.tree_util.tree_unflatten(treedef, [pair[1] for pair in pairs]),
    )


def normalize_observations(statistics: RunningStatistics, observations: Any, clip: float) -> Any:
    """(o - mean) / sqrt(var + 1e-8), clipped to [-clip, clip]."""
    return jax.tree_util.tree_map(
        lambda o, m, v: jnp.clip((o.astype(jnp.float32) - m) / jnp.sqrt(v + 1e-8), -clip, clip),
        observations,
        statistics.mean,
        statistics.variance,
    )
