"""The IMPALA learner: one V-trace actor-critic SGD step per batch of sequences.

One learner step (rl/agents/learning.py's scaffold) takes `batch_size *
sgd_steps_per_learner_step` sequences from the queue and runs
`sgd_steps_per_learner_step` SGD steps in one jitted `lax.scan`, each on `batch_size`
of them: the loss of `losses.impala_loss`, gradients clipped by global norm, Adam or
RMSProp, the learning rate decayed linearly with the actor steps trained on.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents.impala import losses
from rl.agents.impala.config import IMPALAConfig
from rl.agents.learning import Learning
from rl.agents.on_policy import PolicyParams, no_statistics, schedule_fraction, scheduled, steps_taken, stored_actions
from rl.networks.base import FeedForwardNetwork
from rl.replay.sequences import SequenceStep

# IMPALA acts on raw observations: the statistics served with the parameters are empty.
NO_STATISTICS = no_statistics()


class TrainingState(NamedTuple):
    params: Any
    opt_state: Any
    # SGD steps taken.
    steps: jax.Array
    # Steps taken by the actors that the learner has trained on: the schedule's clock.
    actor_steps: jax.Array


def make_optimizer(config: IMPALAConfig) -> optax.GradientTransformation:
    """Clipped gradients into Adam's or RMSProp's direction; the (scheduled) step size is
    applied by the update, which knows how far the run is."""
    if config.optimizer == "rmsprop":
        # g / sqrt(ms + eps), ms <- decay * ms + (1 - decay) * g^2: optax's default
        # eps_in_sqrt=True puts epsilon inside the square root, as TF1's RMSPropOptimizer
        # (used by the IMPALA paper) does; PyTorch's RMSprop adds it outside. One
        # difference from TF1 remains: ms starts at 0 here (initial_scale), at 1 in TF1.
        direction = optax.scale_by_rms(decay=config.rmsprop_decay, eps=config.optimizer_eps)
    else:
        direction = optax.scale_by_adam(eps=config.optimizer_eps)
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), direction)


def impala_sgd_step(
    apply: Any, optimizer: optax.GradientTransformation, config: IMPALAConfig, state: TrainingState, batch: SequenceStep
) -> tuple[TrainingState, dict[str, jax.Array], None]:
    """One SGD step on a batch of sequences (see the module docstring)."""
    learning_rate = scheduled(
        config.learning_rate, config.final_learning_rate_fraction, schedule_fraction(config, state.actor_steps)
    )
    loss_fn = functools.partial(
        losses.impala_loss,
        apply=apply,
        batch=batch,
        actions=stored_actions(batch),
        gamma=config.discount,
        value_cost=config.value_cost,
        entropy_cost=config.entropy_cost,
        lambda_=config.vtrace_lambda,
        clip_rho_threshold=config.clip_rho_threshold,
        clip_pg_rho_threshold=config.clip_pg_rho_threshold,
    )
    gradients, metrics = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = optimizer.update(gradients, state.opt_state, state.params)
    params = optax.apply_updates(state.params, jax.tree_util.tree_map(lambda u: -learning_rate * u, updates))
    actor_steps = state.actor_steps + steps_taken(batch)
    metrics = {
        **metrics,
        "gradient_norm": optax.global_norm(gradients),
        "learning_rate": learning_rate,
        "steps_in_batch": jnp.sum(batch.mask[:, :-1]),
    }
    return TrainingState(params, opt_state, state.steps + 1, actor_steps), metrics, None


def make_learning(network: FeedForwardNetwork, config: IMPALAConfig) -> Learning:
    """IMPALA's learning; it serves `PolicyParams` (with no statistics: IMPALA acts on raw
    observations), so it shares PPO's actor and policies."""
    optimizer = make_optimizer(config)

    def init(random_key: jax.Array) -> TrainingState:
        params = network.init(random_key)
        zero = jnp.zeros((), jnp.int32)
        return TrainingState(params=params, opt_state=optimizer.init(params), steps=zero, actor_steps=zero)

    return Learning(
        init=init,
        sgd_step=lambda state, batch: impala_sgd_step(network.apply, optimizer, config, state, batch.data),
        policy_params=lambda state: PolicyParams(state.params, NO_STATISTICS),
        sgd_steps_per_learner_step=config.sgd_steps_per_learner_step,
    )
