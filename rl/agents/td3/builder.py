"""TD3: twin critics with target policy smoothing, the deterministic policy and both
targets updated every `policy_delay` critic updates (the rest is rl/agents/continuous.py's)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rl.agents import continuous
from rl.systems.learning import Learning
from rl.networks.base import ActorCriticNetworks
from rl.core import Transition

TrainingState = NamedTuple("TrainingState", [(name, Any) for name in (*continuous.TARGET_FIELDS, "key", "steps")])


class TD3Builder(continuous.ContinuousBuilder):
    def make_learning(self, networks: ActorCriticNetworks) -> Learning:
        config = self.config
        policy = networks.policy_network(stochastic=False)
        critic = networks.critic_network(num_critics=2)
        policy_optimizer, critic_optimizer = optimizers = continuous.make_optimizers(config)
        # -Q_1(s, pi(s)): through the first critic only.
        policy_loss = continuous.deterministic_policy_loss(policy, critic, lambda q: q[0, :, 0])

        def critic_loss(critic_params: Any, state: TrainingState, batch: Transition, key: jax.Array):
            """Both critics against y = r + discount * min_i Q'_i(s', a~'), a~' the target policy's
            action plus N(0, sigma^2) noise clipped to +-noise_clip (kept in [-1, 1])."""
            target_action = policy.apply(state.target_policy_params, batch.next_observation)
            sigma = config.target_policy_sigma
            noise_clip = config.target_noise_clip
            noise = jnp.clip(sigma * jax.random.normal(key, target_action.shape), -noise_clip, noise_clip)
            next_action = jnp.clip(target_action + noise, -1.0, 1.0)
            next_q = critic.apply(state.target_critic_params, batch.next_observation, next_action)[..., 0]
            target = continuous.twin_critic_target(batch.reward, batch.discount, next_q)
            q_values = critic.apply(critic_params, batch.observation, batch.action)[..., 0]
            return continuous.twin_critic_loss(q_values, target)

        def init(random_key: jax.Array) -> TrainingState:
            keys = jax.random.split(random_key, 3)
            return continuous.init_state(TrainingState, policy, critic, optimizers, keys, key=keys[2])

        def policy_and_target_update(state: TrainingState, observation: jax.Array):
            loss, grads = jax.value_and_grad(policy_loss)(state.policy_params, state.critic_params, observation)
            state = continuous.step_policy(state, policy_optimizer, grads)
            return continuous.update_targets(state, config.tau), loss

        def skip_update(state: TrainingState, observation: jax.Array):
            # Only the metric: a forward pass, so every step logs the current policy loss.
            return state, policy_loss(state.policy_params, state.critic_params, observation)

        def sgd_step(state: TrainingState, batch: Transition) -> tuple[TrainingState, dict[str, jax.Array]]:
            key, noise_key = jax.random.split(state.key)
            grads, metrics = jax.grad(critic_loss, has_aux=True)(state.critic_params, state, batch, noise_key)
            state = continuous.step_critic(state, critic_optimizer, grads)
            state = state._replace(key=key, steps=state.steps + 1)
            delayed = state.steps % config.policy_delay == 0
            state, loss = jax.lax.cond(delayed, policy_and_target_update, skip_update, state, batch.observation)
            return state, {**metrics, "policy_loss": loss, **continuous.learning_rates(config)}

        return continuous.continuous_learning(init, sgd_step, config, networks.environment_spec)
