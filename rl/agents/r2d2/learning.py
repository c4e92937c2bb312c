"""The R2D2 learner: prioritized sequence replay, burn-in, n-step double-Q targets with
value rescaling and a periodically copied target network (rl/agents/learning.py runs it;
the optimiser, target copies and priority writes are rl/agents/q_learning.py's).

Each SGD step sees its slice of the sampled sequences with their sampling probabilities
(importance weights correct prioritized sampling's bias); after the update every sampled
item's priority becomes eta * max + (1 - eta) * mean of its absolute TD errors.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

import jax
import optax

from rl.agents.q_learning import (
    QLearner,
    TrainingState,
    apply_gradients,
    importance_weights,
    initial_state,
    learning_rate_at,
    make_optimizer,
)
from rl.agents.r2d2.config import R2D2Config
from rl.agents.r2d2.losses import r2d2_loss
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.recurrent import RecurrentNetwork
from rl.replay.dataset import ReplaySample


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
    priorities = extras.pop("priorities")
    metrics = {
        **extras,
        "gradient_norm": optax.global_norm(gradients),
        "learning_rate": learning_rate_at(config, state.steps),
    }
    return apply_gradients(optimizer, gradients, state, config.target_update_period), metrics, priorities


class R2D2Learner(QLearner):
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
        optimizer = make_optimizer(config)
        sgd_step = functools.partial(r2d2_sgd_step, network.unroll, optimizer, config)
        state = initial_state(network.init(random_key), optimizer)
        super().__init__(state, sgd_step, iterator, config, replay_client, counter, logger, prioritized=True)
