"""DQN: the double-DQN loss, its learning and builder, and what the Q-learning agents (DQN,
R2D2, QR-DQN) share: an online network trained with clipped Adam, copied into a target
network every `target_update_period` SGD steps."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents.actors import with_exploration
from rl.agents.builder import ActorLearnerBuilder
from rl.core import Batch
from rl.systems.base import Policy
from rl.systems.learning import Learning, normalized_weights
from rl.networks.base import FeedForwardNetwork
from rl.policies import Greedy
from rl.core import EnvironmentSpec, Transition
from rl.systems.off_policy import OffPolicySystem


class TrainingState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array


def learning_rate_schedule(config: Any) -> float | optax.Schedule:
    """Constant, or decayed (linear or cosine) to `final_learning_rate_fraction` of the rate by
    `learning_rate_decay_actor_steps` (in SGD steps: `config.sgd_steps_by`)."""
    if config.learning_rate_decay_actor_steps <= 0:
        return config.learning_rate
    decay_steps = max(1, config.sgd_steps_by(config.learning_rate_decay_actor_steps))
    fraction = config.final_learning_rate_fraction
    if config.learning_rate_decay == "cosine":
        return optax.cosine_decay_schedule(config.learning_rate, decay_steps, alpha=fraction)
    return optax.linear_schedule(config.learning_rate, config.learning_rate * fraction, decay_steps)


def learning_rate_at(config: Any, steps: jax.Array) -> jax.Array:  # A learner metric.
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
    """The `Learning` of an online and a target network, `sgd_step(optimizer, state, batch)`;
    with `prioritized` its extras become the sampled items' priorities."""
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


def double_q_loss(
    params: Any,
    target_params: Any,
    apply: Callable[[Any, Any], jax.Array],
    batch: Transition,
    weights: jax.Array,
    huber_loss_delta: float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = mean_b w_b * huber(delta_b), delta = r + discount * Q'(s', argmax_a Q(s', a)) - Q(s, a)
    (the online network picks, the target values it); also the per-item |delta|. Written out:
    rlax's import slows start-up."""
    q_tm1 = apply(params, batch.observation)
    next_action = jnp.argmax(apply(params, batch.next_observation), axis=-1)
    next_value = jnp.take_along_axis(apply(target_params, batch.next_observation), next_action[:, None], axis=-1)[:, 0]
    target = jax.lax.stop_gradient(batch.reward + batch.discount * next_value)
    td_error = target - jnp.take_along_axis(q_tm1, batch.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    loss = jnp.mean(weights * optax.huber_loss(td_error, delta=huber_loss_delta))
    return loss, {"abs_td_error": jnp.abs(td_error), "q_mean": jnp.mean(q_tm1)}


class DQNBuilder(ActorLearnerBuilder):
    compiled_system = OffPolicySystem

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            return head(networks.apply(params, observations), key, step)

        return with_exploration(policy, head)

    def make_learning(self, network: FeedForwardNetwork) -> Learning:
        config = self.config

        def sgd_step(optimizer: optax.GradientTransformation, state: TrainingState, batch: Batch):
            weights = normalized_weights(batch.importance_weights)
            gradients, extras = jax.grad(double_q_loss, has_aux=True)(
                state.params, state.target_params, network.apply, batch.data, weights, config.huber_loss_delta
            )
            metrics = {
                "gradient_norm": optax.tree.norm(gradients),
                "learning_rate": learning_rate_at(config, state.steps),
                "q_mean": extras["q_mean"],
                "td_error": jnp.mean(extras["abs_td_error"]),
            }
            state = apply_gradients(optimizer, gradients, state, config.target_update_period)
            return state, metrics, extras["abs_td_error"]

        return q_learning(network.init, sgd_step, config, config.prioritized)._replace(loss_terms=("td_error",))
