"""What the Q-learning agents (DQN, R2D2) share: an online Q-network trained with Adam
(gradients clipped by global norm, the learning rate optionally decayed over the run),
copied into a target network every `target_update_period` SGD steps, and prioritized
replay's importance weights and priorities (`q_learning`)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents.learning import Learning


class TrainingState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array


def learning_rate_schedule(config: Any) -> float | optax.Schedule:
    """The learning rate per SGD step: constant, or decayed to `final_learning_rate_fraction`
    f of it by `learning_rate_decay_actor_steps` (converted to the SGD steps the replay
    ratio allows by then, `config.sgd_steps_by`). With u = step / decay_steps in [0, 1],
    linear is lr (1 - (1 - f) u) and cosine lr (f + (1 - f) (1 + cos(pi u)) / 2).
    """
    if config.learning_rate_decay_actor_steps <= 0:
        return config.learning_rate
    decay_steps = max(1, config.sgd_steps_by(config.learning_rate_decay_actor_steps))
    fraction = config.final_learning_rate_fraction
    if config.learning_rate_decay == "cosine":
        return optax.cosine_decay_schedule(config.learning_rate, decay_steps, alpha=fraction)
    return optax.linear_schedule(config.learning_rate, config.learning_rate * fraction, decay_steps)


def learning_rate_at(config: Any, steps: jax.Array) -> jax.Array:
    """The learning rate Adam applies at SGD step `steps` (`TrainingState.steps` before the
    step, the count optax's schedule reads), logged as a learner metric."""
    schedule = learning_rate_schedule(config)
    return jnp.asarray(schedule(steps) if callable(schedule) else schedule, jnp.float32)


def apply_gradients(
    optimizer: optax.GradientTransformation, gradients: Any, state: TrainingState, target_update_period: int
) -> TrainingState:
    """One optimiser step; the target becomes a copy every `target_update_period` SGD steps."""
    updates, opt_state = optimizer.update(gradients, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    steps = state.steps + 1
    target_params = optax.periodic_update(params, state.target_params, steps, target_update_period)
    return TrainingState(params, target_params, opt_state, steps)


def q_learning(init_params: Callable[[jax.Array], Any], sgd_step: Any, config: Any, prioritized: bool) -> Learning:
    """The `Learning` of an online and a target network (a copy at first); the online
    parameters act; with `prioritized` the SGD steps' extras become the sampled items'
    priorities in `config.replay_table_name`."""
    learning_rate = learning_rate_schedule(config)
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_gradient_norm), optax.adam(learning_rate, eps=config.adam_eps)
    )

    def init(key: jax.Array) -> TrainingState:
        params = init_params(key)
        return TrainingState(params, params, optimizer.init(params), jnp.zeros((), jnp.int32))

    return Learning(
        init=init,
        sgd_step=lambda state, batch: sgd_step(optimizer, state, batch),
        policy_params=lambda state: state.params,
        sgd_steps_per_learner_step=config.sgd_steps_per_learner_step,
        priority_table=config.replay_table_name if prioritized else None,
        importance_sampling_exponent=config.importance_sampling_exponent if prioritized else None,
    )
