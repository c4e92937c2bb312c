"""D4PG's losses: a categorical critic trained on projected distributional Bellman targets."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from rl.lazy_tensorflow import import_without_tensorflow
from rl.types import Transition

rlax = import_without_tensorflow("rlax")  # Not all of TensorFlow (rl/lazy_tensorflow.py).


def projected_target(atoms: jax.Array, reward: jax.Array, discount: jax.Array, target_logits: jax.Array) -> jax.Array:
    """The distribution of `r + discount * Z(s', a')` projected back onto `atoms`.

    `target_logits` is (B, num_atoms); the shifted atoms are projected with
    `rlax.categorical_l2_project`, which keeps the probability mass and clips values
    beyond the support to its ends. Returns (B, num_atoms) probabilities, no gradient.
    """
    probabilities = jax.nn.softmax(target_logits, axis=-1)
    shifted = reward[:, None] + discount[:, None] * atoms[None, :]
    project = jax.vmap(rlax.categorical_l2_project, in_axes=(0, 0, None))
    return jax.lax.stop_gradient(project(shifted, probabilities, atoms))


def critic_loss(
    critic_params: Any,
    target_critic_params: Any,
    target_policy_params: Any,
    policy_apply: Callable[..., jax.Array],
    critic_apply: Callable[..., jax.Array],
    batch: Transition,
    atoms: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Cross-entropy between the critic's distribution and the projected target."""
    next_action = policy_apply(target_policy_params, batch.next_observation)
    target_logits = critic_apply(target_critic_params, batch.next_observation, next_action)[0]
    target = projected_target(atoms, batch.reward, batch.discount, target_logits)
    logits = critic_apply(critic_params, batch.observation, batch.action)[0]
    loss = jnp.mean(optax.softmax_cross_entropy(logits, target))
    q = jnp.sum(jax.nn.softmax(logits, axis=-1) * atoms, axis=-1)
    return loss, {"critic_loss": loss, "q_mean": jnp.mean(q)}


def policy_loss(
    policy_params: Any,
    critic_params: Any,
    policy_apply: Callable[..., jax.Array],
    critic_apply: Callable[..., jax.Array],
    observation: jax.Array,
    atoms: jax.Array,
) -> jax.Array:
    """-E[Z(s, pi(s))]: the deterministic policy gradient of the critic's mean."""
    action = policy_apply(policy_params, observation)
    logits = critic_apply(critic_params, observation, action)[0]
    return -jnp.mean(jnp.sum(jax.nn.softmax(logits, axis=-1) * atoms, axis=-1))
