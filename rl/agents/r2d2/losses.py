"""R2D2's loss on stored sequences, as small pure functions (Kapturowski et al., 2019).

Notation: one stored item has L = B + T rows (B burn-in rows, then the trace's T rows);
row t holds o_t, a_t, the reward r_t and environment discount d_t received after a_t,
and mask_t (1 for a step actually taken, 0 for an episode's final observation and the
padding after it; rl/replay/sequences.py). Q is the online network, Q' the target
network, gamma the discount, n the bootstrap length, and h the value rescaling

    h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x,   h^-1 its inverse (rlax.signed_parabolic).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from rl.lazy_tensorflow import import_without_tensorflow
from rl.replay.sequences import SequenceStep

rlax = import_without_tensorflow("rlax")  # Not all of TensorFlow (rl/lazy_tensorflow.py).

# (params, observations (T, B, ...), state) -> (q_values (T, B, A), final state).
Unroll = Callable[[Any, Any, Any], tuple[jax.Array, Any]]


def rescale(x: jax.Array, epsilon: float) -> jax.Array:
    """h(x): squashes returns so one network fits values of very different sizes."""
    return rlax.signed_hyperbolic(x, epsilon)


def unrescale(x: jax.Array, epsilon: float) -> jax.Array:
    """h^-1(x), so that unrescale(rescale(x)) == x."""
    return rlax.signed_parabolic(x, epsilon)


def n_step_double_q_targets(
    q_online: jax.Array,
    q_target: jax.Array,
    rewards: jax.Array,
    discounts: jax.Array,
    mask: jax.Array,
    gamma: float,
    n: int,
    rescaling_epsilon: float | None,
) -> jax.Array:
    """Targets y_t for rows t = 0..T-2 of one trace of T rows (Q-values (T, A)).

    With a*_{t+1} = argmax_a Q(o_{t+1}, a) (double Q: the online network picks, the target
    network values), v_{t+1} = h^-1(Q'(o_{t+1}, a*_{t+1})), gamma_t = gamma * d_t and
    lambda_t = mask_{t+1}, the n-step return iterates n times

        G_t = r_t + gamma_t [(1 - lambda_t) v_{t+1} + lambda_t G_{t+1}]

    (rlax.n_step_bootstrapped_returns), so G_t = sum_{k<n} (prod_{j<k} gamma_{t+j}) r_{t+k}
    + (prod_{j<n} gamma_{t+j}) v_{t+n}, cut short to bootstrap from the final observation
    of an episode (lambda = 0 before a row where no step was taken; a termination's d = 0
    leaves only rewards, a time limit's d = 1 bootstraps) and from the trace's last row.
    Then y_t = h(G_t). `rescaling_epsilon=None` uses no rescaling (h = identity).
    The targets carry no gradient.
    """
    transform = (lambda x: x) if rescaling_epsilon is None else (lambda x: rescale(x, rescaling_epsilon))
    inverse = (lambda x: x) if rescaling_epsilon is None else (lambda x: unrescale(x, rescaling_epsilon))
    selected = jnp.argmax(q_online[1:], axis=-1)
    values = inverse(jnp.take_along_axis(q_target[1:], selected[:, None], axis=-1)[:, 0])
    returns = rlax.n_step_bootstrapped_returns(
        rewards[:-1], gamma * discounts[:-1], values, n, lambda_t=mask[1:].astype(values.dtype)
    )
    return jax.lax.stop_gradient(transform(returns))


def burn_in_and_unroll(unroll: Unroll, params: Any, observations: Any, state: Any, burn_in: int) -> jax.Array:
    """Q-values of the trace rows (time-major): the first `burn_in` rows only warm the core
    state up from the stored `state`, and no gradient flows back through them."""
    if burn_in > 0:
        burn_in_rows = jax.tree_util.tree_map(lambda x: x[:burn_in], observations)
        _, state = unroll(params, burn_in_rows, state)
        state = jax.lax.stop_gradient(state)
        observations = jax.tree_util.tree_map(lambda x: x[burn_in:], observations)
    q_values, _ = unroll(params, observations, state)
    return q_values


def sequence_priorities(abs_td: jax.Array, mask: jax.Array, eta: float) -> jax.Array:
    """p = eta * max_t |td_t| + (1 - eta) * mean_t |td_t| over each item's trained rows
    (abs_td, mask: (T-1, batch)); an item with none gets 0."""
    count = jnp.sum(mask, axis=0)
    largest = jnp.max(jnp.where(mask > 0, abs_td, 0.0), axis=0)
    mean = jnp.sum(abs_td * mask, axis=0) / jnp.maximum(count, 1.0)
    return eta * largest + (1.0 - eta) * mean


def r2d2_loss(
    params: Any,
    target_params: Any,
    unroll: Unroll,
    batch: SequenceStep,
    weights: jax.Array,
    burn_in: int,
    gamma: float,
    n: int,
    priority_eta: float,
    rescaling_epsilon: float | None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = mean_b w_b * 0.5 * sum_t (y_t - Q(o_t, a_t))^2 over each item's trained rows
    (trace rows t = 0..T-2 with mask_t = 1; y_t from `n_step_double_q_targets`), w_b the
    importance weights. Both networks start from the core state stored with the item's
    first row (`batch.extras["core_state"]`) and run the burn-in rows first.

    A sum over time, as in Acme's R2D2: the paper's Adam epsilon (1e-3) and gradient
    clip (40, conf/agent/r2d2.yaml) are set for gradients of that size; a mean over the
    trace would shrink them T - 1 times and make epsilon dominate Adam's step.

    `batch` is batch-major ((batch, L, ...)). Returns the loss and, per item, its new
    priority (`sequence_priorities`) with metrics.
    """
    time_major = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), batch)
    state = jax.tree_util.tree_map(lambda x: x[:, 0], batch.extras["core_state"])
    q_online = burn_in_and_unroll(unroll, params, time_major.observation, state, burn_in)
    q_target = burn_in_and_unroll(unroll, target_params, time_major.observation, state, burn_in)
    trace = jax.tree_util.tree_map(lambda x: x[burn_in:], time_major)
    targets = jax.vmap(
        lambda q, qt, r, d, m: n_step_double_q_targets(q, qt, r, d, m, gamma, n, rescaling_epsilon),
        in_axes=1,
        out_axes=1,
    )(jax.lax.stop_gradient(q_online), q_target, trace.reward, trace.discount, trace.mask)
    actions = trace.action[:-1].astype(jnp.int32)
    q_taken = jnp.take_along_axis(q_online[:-1], actions[..., None], axis=-1)[..., 0]
    td = targets - q_taken
    mask = trace.mask[:-1].astype(td.dtype)
    per_item = 0.5 * jnp.sum(mask * jnp.square(td), axis=0)
    loss = jnp.mean(weights * per_item)
    priorities = jax.lax.stop_gradient(sequence_priorities(jnp.abs(td), mask, priority_eta))
    metrics = {
        "loss": loss,
        "q_mean": jnp.sum(q_taken * mask) / jnp.maximum(jnp.sum(mask), 1.0),
        "td_error": jnp.sum(jnp.abs(td) * mask) / jnp.maximum(jnp.sum(mask), 1.0),
    }
    return loss, {"priorities": priorities, **metrics}
