"""The R2D2 learner: prioritized sequence replay, burn-in, n-step double-Q targets with
value rescaling and a periodically copied target network (rl/agents/learning.py runs it).

Each SGD step sees its slice of the sampled sequences with their sampling probabilities
(importance weights correct prioritized sampling's bias); after the update every sampled
item's priority becomes eta * max + (1 - eta) * mean of its absolute TD errors.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl.agents.learning import SGDLearner
from rl.agents.r2d2.config import R2D2Config
from rl.agents.r2d2.losses import r2d2_loss
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.recurrent import RecurrentNetwork
from rl.replay.dataset import ReplaySample

# Added to every written priority, so an item whose TD errors are all 0 can still be sampled.
PRIORITY_FLOOR = 1e-6


class TrainingState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array


def importance_weights(probabilities: jax.Array, table_size: jax.Array, exponent: float) -> jax.Array:
    """(N * P(i)) ** -exponent, divided by the batch's largest so no weight exceeds 1."""
    weights = (1.0 / (table_size.astype(jnp.float32) * probabilities.astype(jnp.float32))) ** exponent
    return weights / jnp.max(weights)


def learning_rate_schedule(config: R2D2Config) -> float | optax.Schedule:
    """Constant, or linear to `final_learning_rate_fraction` of it by the SGD step the
    replay ratio reaches at `learning_rate_decay_actor_steps` (a run's budget)."""
    if config.learning_rate_decay_actor_steps <= 0:
        return config.learning_rate
    return optax.linear_schedule(
        config.learning_rate,
        config.learning_rate * config.final_learning_rate_fraction,
        max(1, config.sgd_steps_by(config.learning_rate_decay_actor_steps)),
    )


def make_optimizer(config: R2D2Config) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(config.max_gradient_norm),
        optax.adam(learning_rate_schedule(config), eps=config.adam_eps),
    )


def r2d2_sgd_step(
    unroll: Any, optimizer: optax.GradientTransformation, config: R2D2Config, state: TrainingState, minibatch: Any
) -> tuple[TrainingState, dict[str, jax.Array], jax.Array]:
    """One SGD step on a minibatch of sequences; returns the new priorities per item."""
    data, probabilities, table_size = minibatch
    weights = importance_weights(probabilities, table_size, config.importance_sampling_exponent)
    loss_fn = functools.partial(
        r2d2_loss,
        unroll=unroll,
        batch=data,
        weights=weights,
        burn_in=config.burn_in_length,
        gamma=config.discount,
        n=config.n_step,
        priority_eta=config.priority_eta,
        rescaling_epsilon=config.rescaling_epsilon if config.value_rescaling else None,
    )
    gradients, extras = jax.grad(lambda p: loss_fn(p, state.target_params), has_aux=True)(state.params)
    updates, opt_state = optimizer.update(gradients, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    steps = state.steps + 1
    target_params = optax.periodic_update(params, state.target_params, steps, config.target_update_period)
    priorities = extras.pop("priorities")
    metrics = {**extras, "gradient_norm": optax.global_norm(gradients)}
    return TrainingState(params, target_params, opt_state, steps), metrics, priorities


class R2D2Learner(SGDLearner):
    """R2D2 on the learner scaffold; serves the online parameters as "policy" and writes
    the sampled items' priorities back to the table after every update."""

    def __init__(
        self,
        network: RecurrentNetwork,
        random_key: jax.Array,
        iterator: Iterator[ReplaySample],
        config: R2D2Config,
        replay_client: Any = None,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ):
        self._config = config
        self._client = replay_client
        optimizer = make_optimizer(config)
        params = network.init(random_key)
        state = TrainingState(
            params=params, target_params=params, opt_state=optimizer.init(params), steps=jnp.zeros((), jnp.int32)
        )
        sgd_step = functools.partial(r2d2_sgd_step, network.unroll, optimizer, config)
        super().__init__(state, sgd_step, iterator, config.sgd_steps_per_learner_step, counter, logger)

    def batch_of(self, sample: ReplaySample) -> Any:
        return sample.data, sample.probabilities, sample.table_size

    def after_update(self, sample: ReplaySample, priorities: jax.Array) -> None:
        if self._client is None:
            return
        values = np.asarray(priorities, dtype=np.float64) + PRIORITY_FLOOR
        self._client.mutate_priorities(
            self._config.replay_table_name, updates=dict(zip(np.asarray(sample.keys).tolist(), values.tolist()))
        )

    def policy_params(self, state: TrainingState) -> Any:
        return state.params
