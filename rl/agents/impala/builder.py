"""IMPALA (Espeholt et al., 2018): V-trace targets and losses, the learning and the builder.
pi is the trained policy, mu the behaviour policy, rho_t = pi(a_t|o_t) / mu(a_t|o_t); `mask`
is 1 for a step actually taken and every mean is over those rows."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.core import Batch
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


def vtrace_targets(
    values: jax.Array,
    rewards: jax.Array,
    discounts: jax.Array,
    mask: jax.Array,
    log_rhos: jax.Array,
    gamma: float,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """(V-trace targets v_t, advantages A_t) of rows 0..L-2 of one sequence by rlax.vtrace_td_error_and_advantage
    (no gradient), gamma_t = gamma * d_t, traces c_t = lambda * mask_{t+1} * min(1, rho_t): the trace stops
    before a row with no step (a truncation still bootstraps from its value)."""
    output = import_without_tensorflow("rlax").vtrace_td_error_and_advantage(
        values[:-1],
        values[1:],
        rewards[:-1],
        gamma * discounts[:-1],
        jnp.exp(log_rhos[:-1]),
        lambda_ * mask[1:],
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        stop_target_gradients=True,
    )
    targets = jax.lax.stop_gradient(output.errors + values[:-1])
    return targets, jax.lax.stop_gradient(output.pg_advantage)


def impala_loss(
    params: Any,
    apply: Callable[[Any, Any], tuple[Any, jax.Array]],
    batch: SequenceStep,
    actions: Any,
    gamma: float,
    value_cost: float,
    entropy_cost: float,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = -mean_t A_t log pi(a_t|o_t) + value_cost * mean_t 0.5 (v_t - V(o_t))^2 - entropy_cost
    * H on (B, L, ...) sequences, and the terms as metrics; `actions` are those whose
    probabilities log mu (`batch.extras["log_prob"]`) the behaviour policy stored."""
    num_sequences, length = batch.mask.shape
    flat = lambda x: jnp.reshape(x, (num_sequences * length,) + x.shape[2:])
    unflat = lambda x: jnp.reshape(x, (num_sequences, length) + x.shape[1:])
    policy_output, values = apply(params, jax.tree_util.tree_map(flat, batch.observation))
    log_probs = unflat(policy_log_prob(policy_output, jax.tree_util.tree_map(flat, actions)))
    entropies = unflat(policy_entropy(policy_output))
    values = unflat(values)
    log_rhos = jax.lax.stop_gradient(log_probs) - batch.extras["log_prob"]
    targets, advantages = jax.vmap(
        lambda v, r, d, m, lr: vtrace_targets(v, r, d, m, lr, gamma, lambda_, clip_rho_threshold, clip_pg_rho_threshold)
    )(values, batch.reward, batch.discount, batch.mask, log_rhos)
    mask = batch.mask[:, :-1]  # The rows trained on: all but each sequence's last.
    critic_loss = 0.5 * masked_mean(jnp.square(jax.lax.stop_gradient(targets) - values[:, :-1]), mask)
    pg_loss = -masked_mean(jax.lax.stop_gradient(advantages) * log_probs[:, :-1], mask)
    entropy = masked_mean(entropies[:, :-1], mask)
    loss = pg_loss + value_cost * critic_loss - entropy_cost * entropy
    metrics = {
        "loss": loss,
        "policy_loss": pg_loss,
        "value_loss": critic_loss,
        "entropy": entropy,
        "mean_rho": masked_mean(jnp.exp(log_rhos[:, :-1]), mask),
        "clipped_rho_fraction": masked_mean((log_rhos[:, :-1] > jnp.log(clip_rho_threshold)).astype(jnp.float32), mask),
        "advantage_mean": masked_mean(advantages, mask),
        "value_mean": masked_mean(values[:, :-1], mask),
    }
    return loss, metrics


class TrainingState(NamedTuple):
    params: Any
    opt_state: Any
    steps: jax.Array
    actor_steps: jax.Array  # Actor steps trained on: the schedule's clock.


class IMPALABuilder(on_policy.SequenceQueueBuilder):
    compiled_system = OnPolicySystem

    def compiled_agent(self, network: FeedForwardNetwork, environment_spec: Any) -> CompiledAgent:
        """Compiled, a rollout carries its behaviour policy's log-probabilities as the reverb actors' sequences do,
        so V-trace corrects a rollout acted with older parameters (sebulba's `policy_lag`); its bootstrap value is
        the value head on raw observations, its schedule's clock the actor steps trained on."""
        agent = super().compiled_agent(network, environment_spec)
        value = lambda state, observations: network.apply(state.params, observations)[1]
        return dataclasses.replace(agent, bootstrap_value=value, clock=lambda state: state.actor_steps)

    def make_learning(self, network: FeedForwardNetwork) -> Learning:
        config = self.config
        # Clipped gradients into Adam's or RMSProp's direction (the SGD step scales it).
        if config.optimizer == "rmsprop":
            # Epsilon inside the sqrt, as TF1's RMSPropOptimizer (the paper's); ms starts at 0, not 1.
            direction = optax.scale_by_rms(decay=config.rmsprop_decay, eps=config.optimizer_eps)
        else:
            direction = optax.scale_by_adam(eps=config.optimizer_eps)
        optimizer = optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), direction)
        statistics = normalisation.no_statistics()  # IMPALA acts on raw observations.

        def init(random_key: jax.Array) -> TrainingState:
            params = network.init(random_key)
            zero = jnp.zeros((), jnp.int32)
            return TrainingState(params, optimizer.init(params), steps=zero, actor_steps=zero)

        def sgd_step(state: TrainingState, batch: Batch) -> tuple[TrainingState, dict[str, jax.Array], None]:
            """One SGD step, the learning rate decayed linearly with the actor steps trained on."""
            data = batch.data
            learning_rate = on_policy.scheduled(
                config, state.actor_steps, config.learning_rate, config.final_learning_rate_fraction
            )
            settings = (config.discount, config.value_cost, config.entropy_cost, config.vtrace_lambda)
            thresholds = (config.clip_rho_threshold, config.clip_pg_rho_threshold)
            gradients, metrics = jax.grad(impala_loss, has_aux=True)(
                state.params, network.apply, data, on_policy.stored_actions(data), *settings, *thresholds
            )
            updates, opt_state = optimizer.update(gradients, state.opt_state, state.params)
            params = optax.apply_updates(state.params, jax.tree_util.tree_map(lambda u: -learning_rate * u, updates))
            actor_steps = state.actor_steps + on_policy.steps_taken(data)
            metrics = {
                **metrics,
                "gradient_norm": optax.tree.norm(gradients),
                "learning_rate": learning_rate,
                "steps_in_batch": jnp.sum(data.mask[:, :-1]),
            }
            return TrainingState(params, opt_state, state.steps + 1, actor_steps), metrics, None

        return Learning(
            init=init,
            sgd_step=sgd_step,
            policy_params=lambda state: on_policy.PolicyParams(state.params, statistics),
            sgd_steps_per_learner_step=config.sgd_steps_per_learner_step,
            loss_terms=on_policy.LOSS_TERMS,
        )
