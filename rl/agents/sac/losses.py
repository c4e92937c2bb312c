"""SAC's losses: twin soft-Q critics, the reparameterised policy and the temperature."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from rl.agents.continuous import twin_critic_loss, twin_critic_target
from rl.networks.base import tanh_normal
from rl.types import Transition


def critic_loss(
    critic_params: Any,
    target_critic_params: Any,
    policy_params: Any,
    policy_apply: Callable[..., Any],
    critic_apply: Callable[..., jax.Array],
    batch: Transition,
    temperature: jax.Array,
    key: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Mean squared soft-TD error of both critics against the clipped double-Q target."""
    next_params = policy_apply(policy_params, batch.next_observation)
    next_action, next_log_prob = tanh_normal(next_params.loc, next_params.scale).sample_and_log_prob(seed=key)
    next_q = critic_apply(target_critic_params, batch.next_observation, next_action)[..., 0]
    target = twin_critic_target(batch.reward, batch.discount, next_q, next_log_prob, temperature)
    q = critic_apply(critic_params, batch.observation, batch.action)[..., 0]
    return twin_critic_loss(q, target)


def policy_loss(
    policy_params: Any,
    critic_params: Any,
    policy_apply: Callable[..., Any],
    critic_apply: Callable[..., jax.Array],
    observation: jax.Array,
    temperature: jax.Array,
    key: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """E[alpha * log pi(a|s) - min_i Q_i(s, a)] with a reparameterised a ~ pi(.|s)."""
    params = policy_apply(policy_params, observation)
    action, log_prob = tanh_normal(params.loc, params.scale).sample_and_log_prob(seed=key)
    q = jnp.min(critic_apply(critic_params, observation, action)[..., 0], axis=0)
    return jnp.mean(temperature * log_prob - q), log_prob


def temperature_loss(log_temperature: jax.Array, log_prob: jax.Array, target_entropy: float) -> jax.Array:
    """-log(alpha) * (log pi + target entropy): alpha rises when entropy is below target."""
    return -jnp.mean(log_temperature * jax.lax.stop_gradient(log_prob + target_entropy))
