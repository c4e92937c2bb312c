"""What the anakin launcher needs of an agent, and the compiled chunk built from it.

An agent's *system* (rl/anakin/ppo.py; rl/anakin/off_policy.py with dqn.py or sac.py)
is a set of pure functions over one replica's whole training state (parameters,
optimiser, replay buffer, environment copies, keys): `init(key)` and `update(state)`,
one learner update together with the acting that feeds it. A chunk is `steps_per_chunk` updates in one `lax.scan`, vmapped
over replicas (seeds) and compiled once; the host only sees the chunks' metrics.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from rl.anakin.rollout import EpisodeStatistics, Policy


class System(Protocol):
    # Environment steps (all copies together) per update.
    steps_per_update: int
    # The evaluation policy and the parameters it acts with, from a training state.
    evaluation_policy: Policy

    def init(self, key: jax.Array) -> Any: ...

    def update(self, state: Any) -> tuple[Any, dict[str, jax.Array], EpisodeStatistics]: ...

    def evaluation_params(self, state: Any) -> Any: ...

    def learner_steps(self, state: Any) -> jax.Array: ...


def make_chunk(system: System, steps_per_chunk: int) -> Callable[[Any], tuple[Any, dict[str, jax.Array]]]:
    """`state -> (state, metrics)`: `steps_per_chunk` updates of one replica. The
    metrics are the learner's averaged over the chunk, the episodes that ended in it
    (`episodes`, `episode_return` and `episode_length` as means) and `learner_steps`."""

    def body(state: Any, _: None) -> tuple[Any, tuple[dict[str, jax.Array], EpisodeStatistics]]:
        state, metrics, statistics = system.update(state)
        return state, (metrics, statistics)

    def chunk(state: Any) -> tuple[Any, dict[str, jax.Array]]:
        state, (metrics, statistics) = jax.lax.scan(body, state, None, length=steps_per_chunk)
        episodes = jnp.sum(statistics.episodes)
        count = jnp.maximum(episodes, 1).astype(jnp.float32)
        summary = {
            **jax.tree_util.tree_map(jnp.mean, metrics),
            "episodes": episodes,
            "episode_return": jnp.sum(statistics.return_sum) / count,
            "episode_length": jnp.sum(statistics.length_sum).astype(jnp.float32) / count,
            "learner_steps": system.learner_steps(state),
        }
        return state, summary

    return chunk
