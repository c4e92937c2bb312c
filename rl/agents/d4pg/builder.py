"""D4PG: a deterministic policy and a categorical critic trained on projected n-step
distributional targets, with Polyak targets (the rest is rl/agents/continuous.py's)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents import continuous
from rl.systems.learning import Learning
from rl.lazy_tensorflow import import_without_tensorflow
from rl.networks.base import ActorCriticNetworks
from rl.policies import GaussianNoise
from rl.core import Transition


def projected_target(atoms: jax.Array, reward: jax.Array, discount: jax.Array, target_logits: jax.Array) -> jax.Array:
    """The (B, num_atoms) probabilities of `r + discount * Z(s', a')` projected back onto
    `atoms` (rlax.categorical_l2_project: values beyond the support go to its ends), no gradient."""
    rlax = import_without_tensorflow("rlax")
    probabilities = jax.nn.softmax(target_logits, axis=-1)
    shifted = reward[:, None] + discount[:, None] * atoms[None, :]
    project = jax.vmap(rlax.categorical_l2_project, in_axes=(0, 0, None))
    return jax.lax.stop_gradient(project(shifted, probabilities, atoms))


TrainingState = NamedTuple("TrainingState", [(name, Any) for name in (*continuous.TARGET_FIELDS, "steps")])


class D4PGBuilder(continuous.ContinuousBuilder):
    default_exploration = functools.partial(GaussianNoise, sigma=0.3)

    def make_learning(self, networks: ActorCriticNetworks) -> Learning:
        config = self.config
        policy = networks.policy_network(stochastic=False)
        critic = networks.critic_network(num_critics=1, num_outputs=config.num_atoms)
        policy_optimizer, critic_optimizer = optimizers = continuous.make_optimizers(config)
        atoms = jnp.linspace(config.v_min, config.v_max, config.num_atoms, dtype=jnp.float32)
        mean_value = lambda logits: jnp.sum(jax.nn.softmax(logits, axis=-1) * atoms, axis=-1)
        policy_loss = continuous.deterministic_policy_loss(policy, critic, lambda logits: mean_value(logits[0]))

        def critic_loss(critic_params: Any, state: TrainingState, batch: Transition):
            """Cross-entropy of the critic's distribution and the projected target (the target
            critic's, at the target policy's action)."""
            next_action = policy.apply(state.target_policy_params, batch.next_observation)
            target_logits = critic.apply(state.target_critic_params, batch.next_observation, next_action)[0]
            target = projected_target(atoms, batch.reward, batch.discount, target_logits)
            logits = critic.apply(critic_params, batch.observation, batch.action)[0]
            loss = jnp.mean(optax.softmax_cross_entropy(logits, target))
            return loss, {"critic_loss": loss, "q_mean": jnp.mean(mean_value(logits))}

        def init(random_key: jax.Array) -> TrainingState:
            return continuous.init_state(TrainingState, policy, critic, optimizers, jax.random.split(random_key))

        def sgd_step(state: TrainingState, batch: Transition) -> tuple[TrainingState, dict[str, jax.Array]]:
            critic_grads, metrics = jax.grad(critic_loss, has_aux=True)(state.critic_params, state, batch)
            loss, policy_grads = jax.value_and_grad(policy_loss)(
                state.policy_params, state.critic_params, batch.observation
            )
            state = continuous.step_critic(state, critic_optimizer, critic_grads)
            state = continuous.step_policy(state, policy_optimizer, policy_grads)
            new_state = continuous.update_targets(state._replace(steps=state.steps + 1), config.tau)
            return new_state, {**metrics, "policy_loss": loss, **continuous.learning_rates(config)}

        return continuous.continuous_learning(init, sgd_step, config, networks.environment_spec)
