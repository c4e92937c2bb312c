"""PPO: losses and advantages as pure functions, the learner update (GAE once per batch, then
epochs of minibatch updates) and the builder. pi is the trained policy, mu the behaviour
policy; `mask` is 1 for a step actually taken, and every mean is over those rows."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.systems.learning import Learning
from rl.agents import normalisation, on_policy
from rl.agents.on_policy import masked_mean
from rl.lazy_tensorflow import import_without_tensorflow
from rl.networks.base import FeedForwardNetwork
from rl.networks.base import entropy as policy_entropy
from rl.networks.base import log_prob as policy_log_prob
from rl.systems.base import CompiledAgent
from rl.systems.on_policy import OnPolicySystem

if TYPE_CHECKING:
    from rl.replay.adders import SequenceStep


def sequence_advantages(
    rewards: jax.Array, discounts: jax.Array, values: jax.Array, mask: jax.Array, gamma: float, lambda_: float
) -> tuple[jax.Array, jax.Array]:
    """GAE(gamma, lambda) advantages A_t (rlax.truncated_generalized_advantage_estimation, gamma_t =
    gamma * d_t) and targets R_t = A_t + V_t of rows 0..L-2 of one sequence; lambda_t = lambda *
    mask_{t+1}: the trace stops before a row with no step (a truncation, d_t = 1, still bootstraps)."""
    advantages = import_without_tensorflow("rlax").truncated_generalized_advantage_estimation(
        rewards[:-1], gamma * discounts[:-1], lambda_ * mask[1:], values
    )
    return advantages, advantages + values[:-1]


def clipped_surrogate_loss(
    log_prob: jax.Array,
    behaviour_log_prob: jax.Array,
    advantages: jax.Array,
    epsilon: jax.Array | float,
    mask: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """L = -mean_t min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t), rho_t = pi / mu, and the
    share of rows with |rho_t - 1| > eps."""
    ratio = jnp.exp(log_prob - behaviour_log_prob)
    surrogate = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon) * advantages)
    clipped = (jnp.abs(ratio - 1.0) > epsilon).astype(jnp.float32)
    return -masked_mean(surrogate, mask), masked_mean(clipped, mask)


def value_loss(
    values: jax.Array,
    returns: jax.Array,
    mask: jax.Array,
    old_values: jax.Array | None = None,
    clip_epsilon: float | None = None,
) -> jax.Array:
    """L_V = mean_t 0.5 (V_t - R_t)^2; with `clip_epsilon` the larger of that and the error of
    V_clip = old_V_t + clip(V_t - old_V_t, -eps, eps)."""
    error = jnp.square(values - returns)
    if clip_epsilon is not None:
        clipped = old_values + jnp.clip(values - old_values, -clip_epsilon, clip_epsilon)
        error = jnp.maximum(error, jnp.square(clipped - returns))
    return 0.5 * masked_mean(error, mask)


class Minibatch(NamedTuple):
    """Steps (a flat leading axis) with what the loss needs of each."""

    observation: Any
    action: Any
    behaviour_log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array  # The return target R_t.
    old_value: jax.Array  # V_t before this batch's updates.
    mask: jax.Array


def ppo_loss(
    params: Any,
    apply: Callable[[Any, Any], tuple[Any, jax.Array]],
    batch: Minibatch,
    clip_epsilon: jax.Array | float,
    value_cost: float,
    entropy_cost: float,
    value_clip_epsilon: float | None = None,
    normalize_advantages: bool = True,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = L_clip + value_cost * L_V - entropy_cost * H and the terms as metrics; with
    `normalize_advantages` the minibatch's advantages are standardised first."""
    policy_output, values = apply(params, batch.observation)
    advantages = batch.advantage
    if normalize_advantages:
        mean = masked_mean(advantages, batch.mask)
        advantages = (advantages - mean) / (jnp.sqrt(masked_mean(jnp.square(advantages - mean), batch.mask)) + 1e-8)
    log_prob = policy_log_prob(policy_output, batch.action)
    policy_loss, clip_fraction = clipped_surrogate_loss(
        log_prob, batch.behaviour_log_prob, advantages, clip_epsilon, batch.mask
    )
    critic_loss = value_loss(values, batch.target, batch.mask, batch.old_value, value_clip_epsilon)
    entropy = masked_mean(policy_entropy(policy_output), batch.mask)
    loss = policy_loss + value_cost * critic_loss - entropy_cost * entropy
    # KL(mu || pi) estimated from the sampled actions (Schulman's low-variance k3 estimator).
    log_ratio = log_prob - batch.behaviour_log_prob
    approx_kl = masked_mean(jnp.exp(log_ratio) - 1.0 - log_ratio, batch.mask)
    metrics = {
        "loss": loss,
        "policy_loss": policy_loss,
        "value_loss": critic_loss,
        "entropy": entropy,
        "approx_kl": approx_kl,
        "clip_fraction": clip_fraction,
    }
    return loss, metrics


class TrainingState(NamedTuple):
    params: Any
    opt_state: Any
    observation_statistics: normalisation.RunningStatistics  # Used with `normalize_observations`.
    key: jax.Array
    steps: jax.Array  # Learner steps (batches) taken.
    actor_steps: jax.Array  # Actor steps trained on: the schedules' clock.


def prepare_minibatches(
    apply: Any, params: Any, batch: SequenceStep, config: Any, key: jax.Array
) -> tuple[Minibatch, jax.Array, dict[str, jax.Array]]:
    """The batch's steps with advantages and targets, the rows of every minibatch (each epoch a shuffle of
    them, (num_epochs * num_minibatches, minibatch size)) and batch metrics."""
    num_sequences, length = batch.mask.shape
    flat = lambda x: jnp.reshape(x, (num_sequences * length,) + x.shape[2:])
    _, values = apply(params, jax.tree_util.tree_map(flat, batch.observation))
    values = jnp.reshape(values, (num_sequences, length))
    advantages, targets = jax.vmap(
        functools.partial(sequence_advantages, gamma=config.discount, lambda_=config.gae_lambda)
    )(batch.reward, batch.discount, values, batch.mask)
    count = num_sequences * (length - 1)
    steps_of = lambda x: jnp.reshape(x, (count,) + x.shape[2:])  # (B, L - 1, ...) -> (B * (L - 1), ...)
    trained = lambda x: steps_of(x[:, :-1])  # The rows trained on: all but each sequence's last.
    steps = Minibatch(
        observation=jax.tree_util.tree_map(trained, batch.observation),
        action=jax.tree_util.tree_map(trained, on_policy.stored_actions(batch)),
        behaviour_log_prob=trained(batch.extras["log_prob"]),
        advantage=jax.lax.stop_gradient(steps_of(advantages)),
        target=jax.lax.stop_gradient(steps_of(targets)),
        old_value=jax.lax.stop_gradient(trained(values)),
        mask=trained(batch.mask),
    )
    orders = on_policy.minibatch_orders(key, count, config.num_epochs, config.num_minibatches)
    mask = steps.mask
    target_variance = masked_mean(jnp.square(steps.target - masked_mean(steps.target, mask)), mask)
    metrics = {
        "steps_in_batch": jnp.sum(mask),
        "explained_variance": 1.0
        - masked_mean(jnp.square(steps.target - steps.old_value), mask) / jnp.maximum(target_variance, 1e-8),
        "advantage_mean": masked_mean(steps.advantage, mask),
    }
    return steps, orders, metrics


def ppo_update(
    apply: Any, optimizer: optax.GradientTransformation, config: Any, state: TrainingState, batch: SequenceStep
) -> tuple[TrainingState, dict[str, jax.Array], None]:
    """One learner step: the observation statistics (if normalising), GAE, then one `lax.scan`
    of SGD steps over every epoch's minibatches."""
    key, shuffle_key = jax.random.split(state.key)
    schedule = functools.partial(on_policy.scheduled, config, state.actor_steps)
    learning_rate = schedule(config.learning_rate, config.final_learning_rate_fraction)
    clip_epsilon = schedule(config.clip_epsilon, config.final_clip_epsilon_fraction)
    batch = batch._replace(reward=batch.reward * config.reward_scale)
    statistics = state.observation_statistics
    if config.normalize_observations:
        statistics = normalisation.update_statistics(statistics, batch.observation, batch.mask)
        observation = normalisation.normalize_observations(statistics, batch.observation, config.observation_clip)
        batch = batch._replace(observation=observation)
    steps, orders, batch_metrics = prepare_minibatches(apply, state.params, batch, config, shuffle_key)
    gather = on_policy.row_gatherer(steps)  # Each minibatch one gather of rows.
    costs = (config.value_cost, config.entropy_cost, config.value_clip_epsilon, config.normalize_advantages)

    def sgd_step(carry: tuple[Any, Any], order: jax.Array) -> tuple[tuple[Any, Any], dict[str, jax.Array]]:
        params, opt_state = carry
        minibatch: Minibatch = gather(order)
        gradients, metrics = jax.grad(ppo_loss, has_aux=True)(params, apply, minibatch, clip_epsilon, *costs)
        updates, opt_state = optimizer.update(gradients, opt_state, params)
        params = optax.apply_updates(params, jax.tree_util.tree_map(lambda u: -learning_rate * u, updates))
        return (params, opt_state), {**metrics, "gradient_norm": optax.tree.norm(gradients)}

    (params, opt_state), metrics = jax.lax.scan(sgd_step, (state.params, state.opt_state), orders)
    metrics = {
        **jax.tree_util.tree_map(jnp.mean, metrics),
        **batch_metrics,
        "learning_rate": learning_rate,
        "clip_epsilon": clip_epsilon,
    }
    actor_steps = state.actor_steps + on_policy.steps_taken(batch)
    return TrainingState(params, opt_state, statistics, key, state.steps + 1, actor_steps), metrics, None


class PPOBuilder(on_policy.SequenceQueueBuilder):
    compiled_system = OnPolicySystem

    def compiled_agent(self, network: FeedForwardNetwork, environment_spec: Any) -> CompiledAgent:
        """Its bootstrap value is the network's value head in the environment's reward units (the learner
        scales the rewards a truncation's value is added to), read on observations normalised as the policy
        reads them; its schedules' clock, the actor steps trained on."""
        agent = super().compiled_agent(network, environment_spec)
        clip = self.observation_clip()
        reward_scale = self.config.reward_scale

        def value(state: TrainingState, observations: jax.Array) -> jax.Array:
            if clip is not None:
                observations = normalisation.normalize_observations(state.observation_statistics, observations, clip)
            return network.apply(state.params, observations)[1] / reward_scale

        return dataclasses.replace(agent, bootstrap_value=value, clock=lambda state: state.actor_steps)

    def observation_clip(self) -> float | None:
        return self.config.observation_clip if self.config.normalize_observations else None

    def make_learning(self, network: FeedForwardNetwork) -> Learning:
        config = self.config
        observation_spec = network.observation_spec
        if config.normalize_observations and observation_spec is None:
            raise ValueError(
                "normalize_observations needs a network that names its observation spec (policy_value_mlp)"
            )
        # `ppo_update` applies the scheduled step size.
        optimizer = optax.chain(
            optax.clip_by_global_norm(config.max_gradient_norm), optax.scale_by_adam(eps=config.adam_eps)
        )

        def init(random_key: jax.Array) -> TrainingState:
            init_key, key = jax.random.split(random_key)
            params = network.init(init_key)
            no_spec = observation_spec is None
            statistics = normalisation.no_statistics() if no_spec else normalisation.init_statistics(observation_spec)
            zero = jnp.zeros((), jnp.int32)
            return TrainingState(params, optimizer.init(params), statistics, key, steps=zero, actor_steps=zero)

        return Learning(
            init=init,
            sgd_step=lambda state, batch: ppo_update(network.apply, optimizer, config, state, batch.data),
            policy_params=lambda state: on_policy.PolicyParams(state.params, state.observation_statistics),
            loss_terms=on_policy.LOSS_TERMS,
        )
