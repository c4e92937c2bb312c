"""What the anakin launcher needs of an agent, and the compiled chunk built from it.

An agent's *system* (rl/anakin/ppo.py; rl/anakin/off_policy.py with dqn.py or sac.py)
is a set of pure functions over one replica's whole training state (parameters,
optimiser, replay buffer, environment copies, keys): `init(key)` and `update(state)`,
one learner update together with the acting that feeds it. A chunk is `steps_per_chunk` updates in one `lax.scan`, vmapped
over replicas (seeds) and compiled once; the host only sees the chunks' metrics.

An update that took no SGD step (an off-policy one before the buffer holds
`min_replay_size` transitions) says so with `TRAINED` = False among its metrics; its
other metrics are placeholders, left out of the chunk's means.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from rl.anakin.rollout import EpisodeStatistics, Policy

# The metric by which an update says whether it took SGD steps (absent: it did).
TRAINED = "trained"


class System(Protocol):
    # Environment steps (all copies together) per update.
    steps_per_update: int
    # The evaluation policy and the parameters it acts with, from a training state.
    evaluation_policy: Policy

    def init(self, key: jax.Array) -> Any: ...

    def update(self, state: Any) -> tuple[Any, dict[str, jax.Array], EpisodeStatistics]: ...

    def evaluation_params(self, state: Any) -> Any: ...

    def learner_steps(self, state: Any) -> jax.Array: ...


def mean_over_trained(metrics: dict[str, jax.Array], trained: jax.Array) -> dict[str, jax.Array]:
    """Each metric's mean over the updates (leading axis) where `trained` holds; NaN
    where none did. An update without SGD steps has no loss to average: counting its
    placeholder zeros would pull the chunk's means towards 0."""
    count = jnp.sum(trained)

    def mean(values: jax.Array) -> jax.Array:
        mask = jnp.reshape(trained, trained.shape + (1,) * (values.ndim - 1))
        total = jnp.sum(jnp.where(mask, values, 0), axis=0)
        return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)

    return {name: mean(values) for name, values in metrics.items()}


def make_chunk(system: System, steps_per_chunk: int) -> Callable[[Any], tuple[Any, dict[str, jax.Array]]]:
    """`state -> (state, metrics)`: `steps_per_chunk` updates of one replica. The
    metrics are the learner's averaged over the chunk's updates that trained
    (`mean_over_trained`) with their count (`trained_updates`), the episodes that ended
    in it (`episodes`, `episode_return` and `episode_length` as means) and
    `learner_steps`."""

    def body(state: Any, _: None) -> tuple[Any, tuple[dict[str, jax.Array], EpisodeStatistics]]:
        state, metrics, statistics = system.update(state)
        return state, (metrics, statistics)

    def chunk(state: Any) -> tuple[Any, dict[str, jax.Array]]:
        state, (metrics, statistics) = jax.lax.scan(body, state, None, length=steps_per_chunk)
        metrics = dict(metrics)
        trained = metrics.pop(TRAINED, jnp.ones((steps_per_chunk,), bool))
        episodes = jnp.sum(statistics.episodes)
        count = jnp.maximum(episodes, 1).astype(jnp.float32)
        summary = {
            **mean_over_trained(metrics, trained),
            "trained_updates": jnp.sum(trained),
            "episodes": episodes,
            "episode_return": jnp.sum(statistics.return_sum) / count,
            "episode_length": jnp.sum(statistics.length_sum).astype(jnp.float32) / count,
            "learner_steps": system.learner_steps(state),
        }
        return state, summary

    return chunk
