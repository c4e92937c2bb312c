"""TD3's losses: twin critics with target policy smoothing, deterministic policy gradient."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from rl.agents.continuous import twin_critic_loss, twin_critic_target
from rl.types import Transition


def smoothed_target_action(target_action: jax.Array, key: jax.Array, sigma: float, noise_clip: float) -> jax.Array:
    """The target policy's action plus clipped Gaussian noise, kept in [-1, 1]."""
    noise = jnp.clip(sigma * jax.random.normal(key, target_action.shape), -noise_clip, noise_clip)
    return jnp.clip(target_action + noise, -1.0, 1.0)


def critic_loss(
    critic_params: Any,
    target_critic_params: Any,
    target_policy_params: Any,
    policy_apply: Callable[..., jax.Array],
    critic_apply: Callable[..., jax.Array],
    batch: Transition,
    key: jax.Array,
    sigma: float,
    noise_clip: float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Both critics against y = r + discount * min_i Q'_i(s', a~'), a~' the target
    policy's smoothed action (`smoothed_target_action`); see `twin_critic_loss`."""
    next_action = smoothed_target_action(
        policy_apply(target_policy_params, batch.next_observation), key, sigma, noise_clip
    )
    next_q = critic_apply(target_critic_params, batch.next_observation, next_action)[..., 0]
    target = twin_critic_target(batch.reward, batch.discount, next_q)
    q = critic_apply(critic_params, batch.observation, batch.action)[..., 0]
    return twin_critic_loss(q, target)


def policy_loss(
    policy_params: Any,
    critic_params: Any,
    policy_apply: Callable[..., jax.Array],
    critic_apply: Callable[..., jax.Array],
    observation: jax.Array,
) -> jax.Array:
    """-Q_1(s, pi(s)): the deterministic policy gradient through the first critic."""
    action = policy_apply(policy_params, observation)
    return -jnp.mean(critic_apply(critic_params, observation, action)[0, :, 0])
