"""The R2D2 learner: prioritized sequence replay, burn-in, n-step double-Q targets with
value rescaling and a periodically copied target network (the optimiser, target copies
and priority writes are rl/agents/q_learning.py's).

Each SGD step sees its slice of the sampled sequences with their sampling probabilities
(importance weights correct prioritized sampling's bias); after the update every sampled
item's priority becomes eta * max + (1 - eta) * mean of its absolute TD errors.
"""

from __future__ import annotations

import functools

import jax
import optax

from rl.agents.learning import Batch, Learning, normalized_weights
from rl.agents.q_learning import TrainingState, apply_gradients, learning_rate_at, q_learning
from rl.agents.r2d2.config import R2D2Config
from rl.agents.r2d2.losses import r2d2_loss
from rl.networks.recurrent import RecurrentNetwork


def make_learning(network: RecurrentNetwork, config: R2D2Config) -> Learning:
    """One SGD step on a minibatch of sequences; its extras are the new priority per item."""

    def sgd_step(
        optimizer: optax.GradientTransformation, state: TrainingState, batch: Batch
    ) -> tuple[TrainingState, dict[str, jax.Array], jax.Array]:
        weights = normalized_weights(batch.importance_weights)
        loss_fn = functools.partial(
            r2d2_loss,
            unroll=network.unroll,
            batch=batch.data,
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

    return q_learning(network.init, sgd_step, config, prioritized=True)
