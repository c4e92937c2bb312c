"""The DQN learner: double-DQN updates on batches read from reverb (rl/agents/learning.py
runs them; the optimiser, target network and priorities are rl/agents/q_learning.py's)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Iterator

import jax
import jax.numpy as jnp
import optax

from rl.agents.dqn.config import DQNConfig
from rl.agents.dqn.losses import double_q_loss
from rl.agents.q_learning import (
    QLearner,
    TrainingState,
    apply_gradients,
    importance_weights,
    initial_state,
    learning_rate_at,
    learning_rate_schedule,  # noqa: F401 (read from here by tests/test_schedules.py)
    make_optimizer,
)
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.base import FeedForwardNetwork

if TYPE_CHECKING:  # Only a type here: importing it imports reverb (and TensorFlow).
    from rl.replay.dataset import ReplaySample


def dqn_sgd_step(
    apply: Any, optimizer: optax.GradientTransformation, config: DQNConfig, state: TrainingState, minibatch: Any
) -> tuple[TrainingState, dict[str, jax.Array], jax.Array]:
    """One SGD step on `(transitions, probabilities, table_size)`; returns the items'
    absolute TD errors (their new priorities when prioritized)."""
    data, probabilities, table_size = minibatch
    if config.prioritized:
        weights = importance_weights(probabilities, table_size, config.importance_sampling_exponent)
    else:
        weights = jnp.ones_like(probabilities, dtype=jnp.float32)
    grad_fn = jax.grad(double_q_loss, has_aux=True)
    gradients, extras = grad_fn(state.params, state.target_params, apply, data, weights, config.huber_loss_delta)
    metrics = {
        "gradient_norm": optax.global_norm(gradients),
        "learning_rate": learning_rate_at(config, state.steps),
        "q_mean": extras["q_mean"],
        "td_error": jnp.mean(extras["abs_td_error"]),
    }
    return apply_gradients(optimizer, gradients, state, config.target_update_period), metrics, extras["abs_td_error"]


class DQNLearner(QLearner):
    """Double DQN on the learner scaffold: each SGD step sees its slice of the batch's
    transitions with their sampling probabilities (importance weights when prioritized),
    and the sampled items' priorities become their TD errors."""

    def __init__(
        self,
        network: FeedForwardNetwork,
        random_key: jax.Array,
        iterator: Iterator[ReplaySample],
        config: DQNConfig,
        replay_client: Any = None,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ):
        optimizer = make_optimizer(config)
        sgd_step = functools.partial(dqn_sgd_step, network.apply, optimizer, config)
        state = initial_state(network.init(random_key), optimizer)
        super().__init__(
            state, sgd_step, iterator, config, replay_client, counter, logger, prioritized=config.prioritized
        )
