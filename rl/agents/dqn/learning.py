"""DQN's learning: double-DQN SGD steps on n-step transitions (the optimiser, target
network and priorities are rl/agents/q_learning.py's)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from rl.agents.dqn.config import DQNConfig
from rl.agents.dqn.losses import double_q_loss
from rl.agents.learning import Batch, Learning, normalized_weights
from rl.agents.q_learning import (
    TrainingState,
    apply_gradients,
    learning_rate_at,
    learning_rate_schedule,  # noqa: F401 (read from here by tests/test_schedules.py)
    q_learning,
)
from rl.networks.base import FeedForwardNetwork


def make_learning(network: FeedForwardNetwork, config: DQNConfig) -> Learning:
    """Each SGD step sees its slice of the batch's transitions with their sampling
    probabilities (importance weights when prioritized); the sampled items' priorities
    become their absolute TD errors."""

    def sgd_step(
        optimizer: optax.GradientTransformation, state: TrainingState, batch: Batch
    ) -> tuple[TrainingState, dict[str, jax.Array], jax.Array]:
        weights = normalized_weights(batch.importance_weights)  # All 1 unless prioritized.
        grad_fn = jax.grad(double_q_loss, has_aux=True)
        gradients, extras = grad_fn(
            state.params, state.target_params, network.apply, batch.data, weights, config.huber_loss_delta
        )
        metrics = {
            "gradient_norm": optax.global_norm(gradients),
            "learning_rate": learning_rate_at(config, state.steps),
            "q_mean": extras["q_mean"],
            "td_error": jnp.mean(extras["abs_td_error"]),
        }
        state = apply_gradients(optimizer, gradients, state, config.target_update_period)
        return state, metrics, extras["abs_td_error"]

    return q_learning(network.init, sgd_step, config, config.prioritized)
