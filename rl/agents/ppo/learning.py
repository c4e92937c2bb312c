"""The PPO learner: per batch of sequences, GAE once, then epochs of minibatch updates.

One learner step (rl/agents/learning.py's scaffold, one "SGD step" per call) takes a
batch of `batch_size` sequences from the queue and, in one jitted function: predicts the
values of every row with the current parameters, computes GAE advantages and return
targets per sequence, flattens the steps, and runs `num_epochs` passes of
`num_minibatches` shuffled minibatches as one `lax.scan` of Adam updates.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents.learning import Learning
from rl.agents.normalization import (
    RunningStatistics,
    init_statistics,
    normalize_observations,
    update_statistics,
)
from rl.agents.on_policy import PolicyParams, no_statistics, schedule_fraction, scheduled, steps_taken, stored_actions
from rl.agents.ppo import losses
from rl.agents.ppo.config import PPOConfig
from rl.networks.base import FeedForwardNetwork

if TYPE_CHECKING:  # Only a type here: importing it imports reverb (and TensorFlow).
    from rl.replay.sequences import SequenceStep


class TrainingState(NamedTuple):
    params: Any
    opt_state: Any
    # Running observation statistics (used with `normalize_observations`).
    observation_statistics: RunningStatistics
    key: jax.Array
    # Learner steps (batches) taken.
    steps: jax.Array
    # Steps taken by the actors that the learner has trained on: the schedules' clock.
    actor_steps: jax.Array


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """Clipped gradients into Adam's direction; the (scheduled) step size is applied by
    the update, which knows how far the run is."""
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), optax.scale_by_adam(eps=config.adam_eps))


def prepare_minibatches(
    apply: Any, params: Any, batch: SequenceStep, config: PPOConfig, key: jax.Array
) -> tuple[losses.Minibatch, dict[str, jax.Array]]:
    """The batch's steps with advantages and targets, shuffled per epoch into
    (num_epochs * num_minibatches, minibatch size, ...) arrays."""
    num_sequences, length = batch.mask.shape
    flat = lambda x: jnp.reshape(x, (num_sequences * length,) + x.shape[2:])
    _, values = apply(params, jax.tree_util.tree_map(flat, batch.observation))
    values = jnp.reshape(values, (num_sequences, length))
    advantages, targets = jax.vmap(
        functools.partial(losses.sequence_advantages, gamma=config.discount, lambda_=config.gae_lambda)
    )(batch.reward, batch.discount, values, batch.mask)
    count = num_sequences * (length - 1)
    steps_of = lambda x: jnp.reshape(x, (count,) + x.shape[2:])  # (B, L - 1, ...) -> (B * (L - 1), ...)
    trained = lambda x: steps_of(x[:, :-1])  # The rows trained on: all but each sequence's last.
    steps = losses.Minibatch(
        observation=jax.tree_util.tree_map(trained, batch.observation),
        action=jax.tree_util.tree_map(trained, stored_actions(batch)),
        behaviour_log_prob=trained(batch.extras["log_prob"]),
        advantage=jax.lax.stop_gradient(steps_of(advantages)),
        target=jax.lax.stop_gradient(steps_of(targets)),
        old_value=jax.lax.stop_gradient(trained(values)),
        mask=trained(batch.mask),
    )
    size = count // config.num_minibatches

    def shuffled(epoch_key: jax.Array) -> losses.Minibatch:
        order = jax.random.permutation(epoch_key, count)
        return jax.tree_util.tree_map(
            lambda x: jnp.reshape(x[order], (config.num_minibatches, size) + x.shape[1:]), steps
        )

    epochs = jax.vmap(shuffled)(jax.random.split(key, config.num_epochs))
    minibatches = jax.tree_util.tree_map(lambda x: jnp.reshape(x, (-1,) + x.shape[2:]), epochs)
    mask = steps.mask
    metrics = {
        "steps_in_batch": jnp.sum(mask),
        "explained_variance": 1.0
        - losses.masked_mean(jnp.square(steps.target - steps.old_value), mask)
        / jnp.maximum(
            losses.masked_mean(jnp.square(steps.target - losses.masked_mean(steps.target, mask)), mask), 1e-8
        ),
        "advantage_mean": losses.masked_mean(steps.advantage, mask),
    }
    return minibatches, metrics


def ppo_update(
    apply: Any, optimizer: optax.GradientTransformation, config: PPOConfig, state: TrainingState, batch: SequenceStep
) -> tuple[TrainingState, dict[str, jax.Array], None]:
    """One learner step on a batch of sequences (see the module docstring)."""
    key, shuffle_key = jax.random.split(state.key)
    fraction = schedule_fraction(config, state.actor_steps)
    learning_rate = scheduled(config.learning_rate, config.final_learning_rate_fraction, fraction)
    clip_epsilon = scheduled(config.clip_epsilon, config.final_clip_epsilon_fraction, fraction)
    statistics = state.observation_statistics
    if config.normalize_observations:  # Fold this batch in first, then train on it normalised.
        statistics = update_statistics(statistics, batch.observation, batch.mask)
        batch = batch._replace(
            observation=normalize_observations(statistics, batch.observation, config.observation_clip)
        )
    minibatches, batch_metrics = prepare_minibatches(apply, state.params, batch, config, shuffle_key)
    loss_fn = functools.partial(
        losses.ppo_loss,
        apply=apply,
        clip_epsilon=clip_epsilon,
        value_cost=config.value_cost,
        entropy_cost=config.entropy_cost,
        value_clip_epsilon=config.value_clip_epsilon,
        normalize_advantages=config.normalize_advantages,
    )

    def sgd_step(carry: tuple[Any, Any], minibatch: losses.Minibatch) -> tuple[tuple[Any, Any], dict[str, jax.Array]]:
        params, opt_state = carry
        gradients, metrics = jax.grad(lambda p: loss_fn(p, batch=minibatch), has_aux=True)(params)
        updates, opt_state = optimizer.update(gradients, opt_state, params)
        params = optax.apply_updates(params, jax.tree_util.tree_map(lambda u: -learning_rate * u, updates))
        return (params, opt_state), {**metrics, "gradient_norm": optax.global_norm(gradients)}

    (params, opt_state), metrics = jax.lax.scan(sgd_step, (state.params, state.opt_state), minibatches)
    metrics = {
        **jax.tree_util.tree_map(jnp.mean, metrics),
        **batch_metrics,
        "learning_rate": learning_rate,
        "clip_epsilon": clip_epsilon,
    }
    actor_steps = state.actor_steps + steps_taken(batch)
    return TrainingState(params, opt_state, statistics, key, state.steps + 1, actor_steps), metrics, None


def make_learning(network: FeedForwardNetwork, config: PPOConfig) -> Learning:
    """PPO's learning: each learner step is one `ppo_update` on one batch of sequences."""
    optimizer = make_optimizer(config)
    observation_spec = getattr(network, "observation_spec", None)

    def init(random_key: jax.Array) -> TrainingState:
        init_key, key = jax.random.split(random_key)
        params = network.init(init_key)
        return TrainingState(
            params=params,
            opt_state=optimizer.init(params),
            observation_statistics=init_statistics(observation_spec)
            if observation_spec is not None
            else no_statistics(),
            key=key,
            steps=jnp.zeros((), jnp.int32),
            actor_steps=jnp.zeros((), jnp.int32),
        )

    return Learning(
        init=init,
        sgd_step=lambda state, batch: ppo_update(network.apply, optimizer, config, state, batch.data),
        policy_params=lambda state: PolicyParams(state.params, state.observation_statistics),
    )
