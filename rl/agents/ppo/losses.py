"""PPO's losses and advantage estimates, as small pure functions.

Notation: pi is the policy being trained, mu the behaviour policy that acted (its
log-probabilities are stored with the data), A_t an advantage estimate, R_t a return
target, V the value head, and `mask` 1 for a step actually taken, 0 for the rows a
sequence holds only for bootstrapping or padding (rl/replay/sequences.py). Every mean
below is over the rows with mask 1.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rl.agents.on_policy import entropy_bonus, masked_mean
from rl.networks.policy_value import entropy as policy_entropy
from rl.networks.policy_value import log_prob as policy_log_prob


def sequence_advantages(
    rewards: jax.Array,
    discounts: jax.Array,
    values: jax.Array,
    mask: jax.Array,
    gamma: float,
    lambda_: float,
) -> tuple[jax.Array, jax.Array]:
    """GAE(gamma, lambda) advantages and return targets of one stored sequence.

    The sequence has L rows t = 0..L-1 (row t: reward r_t and environment discount d_t
    received after acting at o_t, V_t = V(o_t)); the estimates are for rows 0..L-2, the
    last row only bootstrapping:

        delta_t = r_t + gamma * d_t * V_{t+1} - V_t
        A_t     = delta_t + gamma * d_t * lambda_t * A_{t+1},   A_{L-1} = 0
        R_t     = A_t + V_t

    with lambda_t = lambda * mask_{t+1}: the trace stops before a row where no step was
    taken (the final observation of an episode, padding), while delta_t still
    bootstraps from that row's value when d_t = 1 (a time-limit truncation). A
    termination has d_t = 0 and bootstraps nothing. Written out as a reverse scan rather
    than taken from rlax: importing rlax imports distrax and TensorFlow Probability,
    seconds of every PPO run's start-up.
    """
    step_discounts = gamma * discounts[:-1]
    deltas = rewards[:-1] + step_discounts * values[1:] - values[:-1]

    def backwards(next_advantage: jax.Array, row: tuple[jax.Array, jax.Array, jax.Array]):
        delta, discount, trace = row
        advantage = delta + discount * trace * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backwards, jnp.zeros((), values.dtype), (deltas, step_discounts, lambda_ * mask[1:]), reverse=True
    )
    return advantages, advantages + values[:-1]


def normalize(advantages: jax.Array, mask: jax.Array, eps: float = 1e-8) -> jax.Array:
    """(A - mean(A)) / (std(A) + eps), mean and std over the masked rows."""
    mean = masked_mean(advantages, mask)
    std = jnp.sqrt(masked_mean(jnp.square(advantages - mean), mask))
    return (advantages - mean) / (std + eps)


def clipped_surrogate_loss(
    log_prob: jax.Array,
    behaviour_log_prob: jax.Array,
    advantages: jax.Array,
    epsilon: jax.Array | float,
    mask: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """PPO's clipped surrogate objective, negated (a loss), and the share of clipped rows.

        rho_t = pi(a_t|o_t) / mu(a_t|o_t) = exp(log pi - log mu)
        L     = -mean_t min(rho_t * A_t, clip(rho_t, 1 - eps, 1 + eps) * A_t)

    The clipped share counts rows where |rho_t - 1| > eps.
    """
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
    """Squared error of the value head against the return targets:

        L_V = mean_t 0.5 * (V_t - R_t)^2

    With `clip_epsilon` (and the values `old_values` predicted before the update) the
    prediction may not gain by moving further than eps from them:

        V_clip = old_V_t + clip(V_t - old_V_t, -eps, eps)
        L_V    = mean_t 0.5 * max((V_t - R_t)^2, (V_clip - R_t)^2)
    """
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
    """L = L_clip + value_cost * L_V - entropy_cost * H, and the terms as metrics.

    With `normalize_advantages` the minibatch's advantages are normalised first.
    """
    policy_output, values = apply(params, batch.observation)
    advantages = normalize(batch.advantage, batch.mask) if normalize_advantages else batch.advantage
    log_prob = policy_log_prob(policy_output, batch.action)
    policy_loss, clip_fraction = clipped_surrogate_loss(
        log_prob, batch.behaviour_log_prob, advantages, clip_epsilon, batch.mask
    )
    critic_loss = value_loss(values, batch.target, batch.mask, batch.old_value, value_clip_epsilon)
    entropy = entropy_bonus(policy_entropy(policy_output), batch.mask)
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
