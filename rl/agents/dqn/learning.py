"""The DQN learner: double-DQN updates on batches read from reverb (rl/agents/learning.py runs them)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl.agents.dqn.config import DQNConfig
from rl.agents.dqn.losses import double_q_loss
from rl.agents.learning import SGDLearner
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.base import FeedForwardNetwork

if TYPE_CHECKING:  # Only a type here: importing it imports reverb (and TensorFlow).
    from rl.replay.dataset import ReplaySample


class TrainingState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array


def learning_rate_schedule(config: DQNConfig) -> float | optax.Schedule:
    """The learning rate per SGD step: constant, or linear until `learning_rate_decay_actor_steps`.

    The decay is set in actor steps, the unit of a run's budget, and converted to the SGD
    steps the replay ratio allows by then, so it ends where the run does.
    """
    if config.learning_rate_decay_actor_steps <= 0:
        return config.learning_rate
    return optax.linear_schedule(
        config.learning_rate,
        config.learning_rate * config.final_learning_rate_fraction,
        max(1, config.sgd_steps_by(config.learning_rate_decay_actor_steps)),
    )


def make_optimizer(config: DQNConfig) -> optax.GradientTransformation:
    learning_rate = learning_rate_schedule(config)
    return optax.chain(
        optax.clip_by_global_norm(config.max_gradient_norm),
        optax.adam(learning_rate, eps=config.adam_eps),
    )


def importance_weights(probabilities: jax.Array, table_size: jax.Array, exponent: float) -> jax.Array:
    """Corrects prioritized sampling's bias; normalised by the largest weight for stability."""
    weights = (1.0 / (table_size.astype(jnp.float32) * probabilities)) ** exponent
    return weights / jnp.max(weights)


class DQNLearner(SGDLearner):
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
        self._config = config
        self._client = replay_client
        optimizer = make_optimizer(config)
        params = network.init(random_key)
        state = TrainingState(
            params=params,
            target_params=params,
            opt_state=optimizer.init(params),
            steps=jnp.zeros((), jnp.int32),
        )
        sgd_step = functools.partial(self._sgd_step, network.apply, optimizer, config)
        super().__init__(state, sgd_step, iterator, config.sgd_steps_per_learner_step, counter, logger)

    @staticmethod
    def _sgd_step(apply, optimizer, config: DQNConfig, state: TrainingState, minibatch):
        data, probabilities, table_size = minibatch
        if config.prioritized:
            weights = importance_weights(probabilities, table_size, config.importance_sampling_exponent)
        else:
            weights = jnp.ones_like(probabilities, dtype=jnp.float32)
        grad_fn = jax.grad(double_q_loss, has_aux=True)
        gradients, extras = grad_fn(
            state.params, state.target_params, apply, data, weights, config.huber_loss_delta
        )
        updates, opt_state = optimizer.update(gradients, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        steps = state.steps + 1
        target_params = optax.periodic_update(
            params, state.target_params, steps, config.target_update_period
        )
        metrics = {
            "gradient_norm": optax.global_norm(gradients),
            "q_mean": extras["q_mean"],
            "td_error": jnp.mean(extras["abs_td_error"]),
        }
        return TrainingState(params, target_params, opt_state, steps), metrics, extras["abs_td_error"]

    def batch_of(self, sample: ReplaySample) -> Any:
        return sample.data, sample.probabilities, sample.table_size

    def after_update(self, sample: ReplaySample, abs_td_errors: jax.Array) -> None:
        if self._config.prioritized and self._client is not None:
            priorities = np.asarray(abs_td_errors, dtype=np.float64) + 1e-6
            self._client.mutate_priorities(
                self._config.replay_table_name, updates=dict(zip(sample.keys.tolist(), priorities.tolist()))
            )

    def policy_params(self, state: TrainingState) -> Any:
        return state.params
