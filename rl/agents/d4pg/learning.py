"""The D4PG learner: distributional critic, deterministic policy, Polyak target networks."""

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
from rl.agents.d4pg import losses
from rl.agents.d4pg.config import D4PGConfig
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
    steps: jax.Array


def support(config: D4PGConfig) -> jax.Array:
    return jnp.linspace(config.v_min, config.v_max, config.num_atoms, dtype=jnp.float32)


def make_learning(networks: ActorCriticNetworks, config: D4PGConfig) -> Learning:
    """Each SGD step updates the distributional critic and the policy, then both targets."""
    policy = networks.policy_network(stochastic=False)
    critic = networks.critic_network(num_critics=1, num_outputs=config.num_atoms)
    policy_optimizer, critic_optimizer = make_optimizers(config)
    atoms = support(config)

    def init(random_key: jax.Array) -> TrainingState:
        policy_key, critic_key = jax.random.split(random_key)
        return TrainingState(
            **init_with_targets(policy, critic, policy_optimizer, critic_optimizer, policy_key, critic_key),
            steps=jnp.zeros((), jnp.int32),
        )

    def sgd_step(state: TrainingState, batch: Transition) -> tuple[TrainingState, dict[str, jax.Array]]:
        critic_grads, metrics = jax.grad(losses.critic_loss, has_aux=True)(
            state.critic_params,
            state.target_critic_params,
            state.target_policy_params,
            policy.apply,
            critic.apply,
            batch,
            atoms,
        )
        policy_loss, policy_grads = jax.value_and_grad(losses.policy_loss)(
            state.policy_params, state.critic_params, policy.apply, critic.apply, batch.observation, atoms
        )
        critic_params, critic_opt_state = gradient_step(
            critic_optimizer, critic_grads, state.critic_opt_state, state.critic_params
        )
        policy_params, policy_opt_state = gradient_step(
            policy_optimizer, policy_grads, state.policy_opt_state, state.policy_params
        )
        new_state = TrainingState(
            policy_params=policy_params,
            target_policy_params=polyak_update(policy_params, state.target_policy_params, config.tau),
            critic_params=critic_params,
            target_critic_params=polyak_update(critic_params, state.target_critic_params, config.tau),
            policy_opt_state=policy_opt_state,
            critic_opt_state=critic_opt_state,
            steps=state.steps + 1,
        )
        return new_state, {**metrics, "policy_loss": policy_loss, **learning_rates(config)}

    return continuous_learning(init, sgd_step, config, networks.environment_spec.actions)
