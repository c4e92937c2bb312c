"""The double-DQN loss on n-step transitions."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import rlax

from rl.types import Transition


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
    td_error = jax.vmap(rlax.double_q_learning)(
        q_tm1, batch.action, batch.reward, batch.discount, q_t_value, q_t_selector
    )
    loss = jnp.mean(weights * rlax.huber_loss(td_error, huber_loss_delta))
    extras = {"abs_td_error": jnp.abs(td_error), "q_mean": jnp.mean(q_tm1)}
    return loss, extras
