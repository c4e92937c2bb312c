"""QR-DQN (Dabney et al., 2018), added as a user adds an agent (docs/adding_an_agent.md):
DQN's replay, acting, optimiser and target network, with `num_quantiles` outputs per
action and a quantile-regression loss. Nothing in rl/ names it."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rl.agents.actors import with_exploration
from rl.agents.configs import builder_factory
from rl.agents.dqn.builder import DQNBuilder
from rl.agents.dqn import DQNConfig
from rl.core import Batch
from rl.systems.learning import Learning
from rl.agents.dqn.builder import apply_gradients, learning_rate_at, q_learning
from rl.policies import Greedy


@dataclasses.dataclass
class QRDQNConfig(DQNConfig):
    num_quantiles: int = 32


def quantile_huber_loss(quantiles: jax.Array, targets: jax.Array, kappa: float) -> jax.Array:
    """With u_ij = target_j - quantile_i and tau_i = (2i + 1) / 2N, the mean over the batch
    of sum_i mean_j |tau_i - 1{u_ij < 0}| * huber_kappa(u_ij) / kappa."""
    n = quantiles.shape[-1]
    tau = (jnp.arange(n, dtype=jnp.float32) + 0.5) / n
    u = targets[:, None, :] - quantiles[:, :, None]
    magnitude = jnp.abs(u)
    huber = jnp.where(magnitude <= kappa, 0.5 * u**2, kappa * (magnitude - 0.5 * kappa))
    weight = jnp.abs(tau[None, :, None] - (u < 0).astype(jnp.float32))
    return jnp.mean(jnp.sum(jnp.mean(weight * huber / kappa, axis=-1), axis=-1))


def _of_actions(values: jax.Array, actions: jax.Array) -> jax.Array:
    """(B, A, N) values -> the (B, N) of each row's action."""
    return jnp.take_along_axis(values, actions[:, None, None].astype(jnp.int32), axis=1)[:, 0]


class QRDQNBuilder(DQNBuilder):
    def network_outputs(self) -> dict[str, Any]:
        return {"outputs_per_action": self.config.num_quantiles}

    def make_policy(self, networks: Any, environment_spec: Any, evaluation: bool) -> Any:
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            return head(jnp.mean(networks.apply(params, observations), axis=-1), key, step)

        return with_exploration(policy, head)

    def make_learning(self, networks: Any) -> Learning:
        config = self.config

        def sgd_step(optimizer: Any, state: Any, batch: Batch) -> tuple[Any, dict[str, jax.Array], None]:
            data = batch.data
            next_action = jnp.argmax(jnp.mean(networks.apply(state.params, data.next_observation), axis=-1), axis=-1)
            next_quantiles = _of_actions(networks.apply(state.target_params, data.next_observation), next_action)
            targets = jax.lax.stop_gradient(data.reward[:, None] + data.discount[:, None] * next_quantiles)

            def loss(params: Any) -> tuple[jax.Array, jax.Array]:
                chosen = _of_actions(networks.apply(params, data.observation), data.action)
                return quantile_huber_loss(chosen, targets, config.huber_loss_delta), jnp.mean(chosen)

            (value, q_mean), gradients = jax.value_and_grad(loss, has_aux=True)(state.params)
            metrics = {"quantile_loss": value, "q_mean": q_mean, "learning_rate": learning_rate_at(config, state.steps)}
            return apply_gradients(optimizer, gradients, state, config.target_update_period), metrics, None

        return q_learning(networks.init, sgd_step, config, prioritized=False)


make_builder = builder_factory(QRDQNBuilder, QRDQNConfig)
