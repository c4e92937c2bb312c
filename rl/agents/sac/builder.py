"""SAC: twin soft-Q critics with Polyak targets, a reparameterised tanh-Gaussian policy
and a learned entropy temperature (the rest is rl/agents/continuous.py's)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents import continuous
from rl.systems.learning import Learning
from rl.networks.base import ActorCriticNetworks, tanh_normal
from rl.policies import Stochastic
from rl.core import Transition


class TrainingState(NamedTuple):
    policy_params: Any
    critic_params: Any
    target_critic_params: Any
    log_temperature: jax.Array
    policy_opt_state: Any
    critic_opt_state: Any
    temperature_opt_state: Any
    key: jax.Array
    steps: jax.Array


def temperature_loss(log_temperature: jax.Array, log_prob: jax.Array, target_entropy: float) -> jax.Array:
    """-log(alpha) * (log pi + target entropy): alpha rises when entropy is below target."""
    return -jnp.mean(log_temperature * jax.lax.stop_gradient(log_prob + target_entropy))


def target_entropy(config: Any, action_size: int) -> float:
    """`agent.target_entropy`, or `target_entropy_per_action` for each action dimension when it is null."""
    if config.target_entropy is None:
        return float(config.target_entropy_per_action * action_size)
    return float(config.target_entropy)


def soft_critic_loss(policy: Any, critic: Any, critic_params: Any, state: Any, batch: Transition, alpha: Any, key: Any):
    """Both critics against y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s')."""
    next_params = policy.apply(state.policy_params, batch.next_observation)
    next_action, next_log_prob = tanh_normal(next_params.loc, next_params.scale).sample_and_log_prob(seed=key)
    next_q = critic.apply(state.target_critic_params, batch.next_observation, next_action)[..., 0]
    target = continuous.twin_critic_target(batch.reward, batch.discount, next_q, next_log_prob, alpha)
    q_values = critic.apply(critic_params, batch.observation, batch.action)[..., 0]
    return continuous.twin_critic_loss(q_values, target)


def soft_policy_loss(policy: Any, critic: Any, params: Any, critic_params: Any, observation: Any, alpha: Any, key: Any):
    """E[alpha * log pi(a|s) - min_i Q_i(s, a)] with a reparameterised a ~ pi(.|s); also log pi(a|s)."""
    output = policy.apply(params, observation)
    action, log_prob = tanh_normal(output.loc, output.scale).sample_and_log_prob(seed=key)
    q = jnp.min(critic.apply(critic_params, observation, action)[..., 0], axis=0)
    return jnp.mean(alpha * log_prob - q), log_prob


class SACBuilder(continuous.ContinuousBuilder):
    stochastic_policy = True
    default_exploration = Stochastic

    def make_learning(self, networks: ActorCriticNetworks) -> Learning:
        config = self.config
        policy = networks.policy_network(stochastic=True)
        critic = networks.critic_network(num_critics=2)
        policy_optimizer, critic_optimizer = optimizers = continuous.make_optimizers(config)
        temperature_optimizer = optax.adam(config.temperature_learning_rate)
        entropy_target = target_entropy(config, networks.action_size)
        critic_loss = functools.partial(soft_critic_loss, policy, critic)
        policy_loss = functools.partial(soft_policy_loss, policy, critic)

        def init(random_key: jax.Array) -> TrainingState:
            keys = jax.random.split(random_key, 3)
            log_temperature = jnp.log(jnp.asarray(config.initial_temperature, jnp.float32))
            temperature_opt_state = temperature_optimizer.init(log_temperature)
            rest = {"log_temperature": log_temperature, "temperature_opt_state": temperature_opt_state, "key": keys[2]}
            return continuous.init_state(TrainingState, policy, critic, optimizers, keys, **rest)

        def sgd_step(state: TrainingState, batch: Transition) -> tuple[TrainingState, dict[str, jax.Array]]:
            key, critic_key, policy_key = jax.random.split(state.key, 3)
            temperature = jnp.exp(state.log_temperature)
            critic_grads, critic_metrics = jax.grad(critic_loss, has_aux=True)(
                state.critic_params, state, batch, temperature, critic_key
            )
            updated = continuous.step_critic(state, critic_optimizer, critic_grads)
            (loss, log_prob), policy_grads = jax.value_and_grad(policy_loss, has_aux=True)(
                state.policy_params, updated.critic_params, batch.observation, temperature, policy_key
            )
            updated = continuous.step_policy(updated, policy_optimizer, policy_grads)
            temperature_value, temperature_grad = jax.value_and_grad(temperature_loss)(
                state.log_temperature, log_prob, entropy_target
            )
            log_temperature, temperature_opt_state = continuous.optimizer_step(
                temperature_optimizer, temperature_grad, state.log_temperature, state.temperature_opt_state
            )
            new_state = updated._replace(
                target_critic_params=optax.incremental_update(
                    updated.critic_params, state.target_critic_params, config.tau
                ),
                log_temperature=log_temperature,
                temperature_opt_state=temperature_opt_state,
                key=key,
                steps=state.steps + 1,
            )
            metrics = {
                **critic_metrics,
                "policy_loss": loss,
                "temperature": temperature,
                "temperature_loss": temperature_value,
                "entropy": -jnp.mean(log_prob),
                **continuous.learning_rates(config),
                "temperature_learning_rate": jnp.asarray(config.temperature_learning_rate, jnp.float32),
            }
            return new_state, metrics

        return continuous.continuous_learning(init, sgd_step, config, networks.environment_spec)
