"""The TD3 learner: twin critics, target policy smoothing, delayed policy and target updates."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rl.agents.continuous import (
    continuous_learning,
    gradient_step,
    init_with_targets,
    learning_rates,
    make_optimizers,
    polyak_update,
)
from rl.agents.td3 import losses
from rl.agents.td3.config import TD3Config
from rl.agents.learning import Learning
from rl.networks.actor_critic import ActorCriticNetworks
from rl.types import Transition


class TrainingState(NamedTuple):
    policy_params: Any
    target_policy_params: Any
    critic_params: Any
    target_critic_params: Any
    policy_opt_state: Any
    critic_opt_state: Any
    key: jax.Array
    steps: jax.Array


def make_learning(networks: ActorCriticNetworks, config: TD3Config) -> Learning:
    """Each SGD step updates the critics; the policy and both targets move every
    `policy_delay` steps."""
    policy = networks.policy_network(stochastic=False)
    critic = networks.critic_network(num_critics=2)
    policy_optimizer, critic_optimizer = make_optimizers(config)

    def init(random_key: jax.Array) -> TrainingState:
        policy_key, critic_key, key = jax.random.split(random_key, 3)
        return TrainingState(
            **init_with_targets(policy, critic, policy_optimizer, critic_optimizer, policy_key, critic_key),
            key=key,
            steps=jnp.zeros((), jnp.int32),
        )

    def policy_and_target_update(state: TrainingState, observation: jax.Array):
        policy_loss, grads = jax.value_and_grad(losses.policy_loss)(
            state.policy_params, state.critic_params, policy.apply, critic.apply, observation
        )
        policy_params, policy_opt_state = gradient_step(
            policy_optimizer, grads, state.policy_opt_state, state.policy_params
        )
        state = state._replace(
            policy_params=policy_params,
            policy_opt_state=policy_opt_state,
            target_policy_params=polyak_update(policy_params, state.target_policy_params, config.tau),
            target_critic_params=polyak_update(state.critic_params, state.target_critic_params, config.tau),
        )
        return state, policy_loss

    def skip_update(state: TrainingState, observation: jax.Array):
        # Only the metric: a forward pass, so every step logs the current policy loss.
        return state, losses.policy_loss(
            state.policy_params, state.critic_params, policy.apply, critic.apply, observation
        )

    def sgd_step(state: TrainingState, batch: Transition) -> tuple[TrainingState, dict[str, jax.Array]]:
        key, noise_key = jax.random.split(state.key)
        grads, metrics = jax.grad(losses.critic_loss, has_aux=True)(
            state.critic_params,
            state.target_critic_params,
            state.target_policy_params,
            policy.apply,
            critic.apply,
            batch,
            noise_key,
            config.target_policy_sigma,
            config.target_noise_clip,
        )
        critic_params, critic_opt_state = gradient_step(
            critic_optimizer, grads, state.critic_opt_state, state.critic_params
        )
        state = state._replace(
            critic_params=critic_params,
            critic_opt_state=critic_opt_state,
            key=key,
            steps=state.steps + 1,
        )
        # Delayed policy updates: the policy and both targets move every policy_delay steps.
        state, policy_loss = jax.lax.cond(
            state.steps % config.policy_delay == 0,
            policy_and_target_update,
            skip_update,
            state,
            batch.observation,
        )
        return state, {**metrics, "policy_loss": policy_loss, **learning_rates(config)}

    return continuous_learning(init, sgd_step, config, networks.environment_spec.actions)
