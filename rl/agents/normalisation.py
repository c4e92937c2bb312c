"""Observations normalised by running statistics (mean and variance per element, Chan et al.'s parallel update):
what PPO and the continuous-control agents share under `agent.normalize_observations`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rl.networks.base import zeros_like_spec


class RunningStatistics(NamedTuple):
    """Mean and variance per observation element over `count` observations."""

    count: jax.Array
    mean: Any
    variance: Any


def init_statistics(observation_spec: Any) -> RunningStatistics:
    """No observations yet: mean 0 and variance 1 (normalising is the identity)."""
    zeros = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), zeros_like_spec(observation_spec, None))
    return RunningStatistics(jnp.zeros((), jnp.float32), zeros, jax.tree_util.tree_map(jnp.ones_like, zeros))


def no_statistics() -> RunningStatistics:  # Served by a learner that does not normalise observations.
    return RunningStatistics(jnp.zeros((), jnp.float32), (), ())


def update_statistics(statistics: RunningStatistics, observations: Any, mask: jax.Array) -> RunningStatistics:
    """Folds in the observations whose `mask` (their leading axes) is 1, by Chan et al.'s parallel update."""
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
    pair = jax.tree_util.tree_structure((0, 0))
    mean, variance = jax.tree_util.tree_transpose(jax.tree_util.tree_structure(statistics.mean), pair, merged)
    return RunningStatistics(total, mean, variance)


def normalize_observations(statistics: RunningStatistics, observations: Any, clip: float) -> Any:
    """(o - mean) / sqrt(var + 1e-8), clipped to [-clip, clip]."""
    return jax.tree_util.tree_map(
        lambda o, m, v: jnp.clip((o.astype(jnp.float32) - m) / jnp.sqrt(v + 1e-8), -clip, clip),
        observations,
        statistics.mean,
        statistics.variance,
    )
