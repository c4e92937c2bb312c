"""The SAC learner: twin critics with Polyak targets, tanh-Gaussian policy, learned temperature."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents.continuous import continuous_learning, gradient_step, learning_rates, make_optimizers, polyak_update
from rl.agents.learning import Learning
from rl.agents.sac import losses
from rl.agents.sac.config import SACConfig
from rl.networks.actor_critic import ActorCriticNetworks
from rl.types import Transition


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


def target_entropy(config: SACConfig, action_size: int) -> float:
    return float(-action_size) if config.target_entropy is None else float(config.target_entropy)


def make_learning(networks: ActorCriticNetworks, config: SACConfig) -> Learning:
    """Each SGD step updates the critics, then the policy, then the temperature."""
    policy = networks.policy_network(stochastic=True)
    critic = networks.critic_network(num_critics=2)
    policy_optimizer, critic_optimizer = make_optimizers(config)
    temperature_optimizer = optax.adam(config.temperature_learning_rate)
    entropy_target = target_entropy(config, networks.action_size)

    def init(random_key: jax.Array) -> TrainingState:
        policy_key, critic_key, key = jax.random.split(random_key, 3)
        policy_params = policy.init(policy_key)
        critic_params = critic.init(critic_key)
        log_temperature = jnp.log(jnp.asarray(config.initial_temperature, jnp.float32))
        return TrainingState(
            policy_params=policy_params,
            critic_params=critic_params,
            target_critic_params=critic_params,
            log_temperature=log_temperature,
            policy_opt_state=policy_optimizer.init(policy_params),
            critic_opt_state=critic_optimizer.init(critic_params),
            temperature_opt_state=temperature_optimizer.init(log_temperature),
            key=key,
            steps=jnp.zeros((), jnp.int32),
        )

    def sgd_step(state: TrainingState, batch: Transition) -> tuple[TrainingState, dict[str, jax.Array]]:
        key, critic_key, policy_key = jax.random.split(state.key, 3)
        temperature = jnp.exp(state.log_temperature)

        critic_grads, critic_metrics = jax.grad(losses.critic_loss, has_aux=True)(
            state.critic_params,
            state.target_critic_params,
            state.policy_params,
            policy.apply,
            critic.apply,
            batch,
            temperature,
            critic_key,
        )
        critic_params, critic_opt_state = gradient_step(
            critic_optimizer, critic_grads, state.critic_opt_state, state.critic_params
        )

        (policy_loss, log_prob), policy_grads = jax.value_and_grad(losses.policy_loss, has_aux=True)(
            state.policy_params,
            critic_params,
            policy.apply,
            critic.apply,
            batch.observation,
            temperature,
            policy_key,
        )
        policy_params, policy_opt_state = gradient_step(
            policy_optimizer, policy_grads, state.policy_opt_state, state.policy_params
        )

        temperature_loss, temperature_grad = jax.value_and_grad(losses.temperature_loss)(
            state.log_temperature, log_prob, entropy_target
        )
        log_temperature, temperature_opt_state = gradient_step(
            temperature_optimizer, temperature_grad, state.temperature_opt_state, state.log_temperature
        )

        new_state = TrainingState(
            policy_params=policy_params,
            critic_params=critic_params,
            target_critic_params=polyak_update(critic_params, state.target_critic_params, config.tau),
            log_temperature=log_temperature,
            policy_opt_state=policy_opt_state,
            critic_opt_state=critic_opt_state,
            temperature_opt_state=temperature_opt_state,
            key=key,
            steps=state.steps + 1,
        )
        metrics = {
            **critic_metrics,
            "policy_loss": policy_loss,
            "temperature": temperature,
            "temperature_loss": temperature_loss,
            "entropy": -jnp.mean(log_prob),
            **learning_rates(config),
            "temperature_learning_rate": jnp.asarray(config.temperature_learning_rate, jnp.float32),
        }
        return new_state, metrics

    return continuous_learning(init, sgd_step, config, networks.environment_spec.actions)
