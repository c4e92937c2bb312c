"""The double-DQN loss on n-step transitions.

Written out rather than taken from rlax (`double_q_learning`, `huber_loss`): importing
rlax imports distrax and TensorFlow Probability, seconds of every DQN run's start-up for
a few lines of arithmetic.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from rl.types import Transition


def double_q_td_error(
    q_tm1: jax.Array,
    action: jax.Array,
    reward: jax.Array,
    discount: jax.Array,
    q_t_value: jax.Array,
    q_t_selector: jax.Array,
) -> jax.Array:
    """delta = r + discount * Q_target(s', argmax_a Q_online(s', a)) - Q_online(s, a), per
    row of a (B, num_actions) batch; no gradient flows into the target."""
    next_action = jnp.argmax(q_t_selector, axis=-1)
    next_value = jnp.take_along_axis(q_t_value, next_action[:, None], axis=-1)[:, 0]
    target = jax.lax.stop_gradient(reward + discount * next_value)
    chosen = jnp.take_along_axis(q_tm1, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return target - chosen


def huber(x: jax.Array, delta: float) -> jax.Array:
    """x^2 / 2 for |x| <= delta, delta * (|x| - delta / 2) beyond: quadratic near zero,
    linear (bounded gradients) for large errors."""
    magnitude = jnp.abs(x)
    inner = jnp.minimum(magnitude, delta)
    return 0.5 * jnp.square(inner) + delta * (magnitude - inner)


def double_q_loss(
    params: Any,
    target_params: Any,
    apply: Callable[[Any, Any], jax.Array],
    batch: Transition,
    weights: jax.Array,
    huber_loss_delta: float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Importance-weighted Huber loss of the double-Q TD error.

    The online network picks the next action and the target network values it, which
    removes most of Q-learning's overestimation. Returns the loss and, for priorities,
    the per-item absolute TD errors.
    """
    q_tm1 = apply(params, batch.observation)
    q_t_selector = apply(params, batch.next_observation)
    q_t_value = apply(target_params, batch.next_observation)
    td_error = double_q_td_error(q_tm1, batch.action, batch.reward, batch.discount, q_t_value, q_t_selector)
    loss = jnp.mean(weights * huber(td_error, huber_loss_delta))
    extras = {"abs_td_error": jnp.abs(td_error), "q_mean": jnp.mean(q_tm1)}
    return loss, extras
