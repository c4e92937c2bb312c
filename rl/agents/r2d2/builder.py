"""R2D2's loss on stored sequences (burn-in rows, then a trace; each row with the LSTM state
acted from), its learning and builder (the optimiser and target copies are DQN's); h is the
value rescaling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import optax

from rl.agents.actors import RecurrentActor, RecurrentPolicy
from rl.agents.builder import ActorLearnerBuilder
from rl.core import Batch
from rl.systems.learning import Learning, normalized_weights
from rl.agents.dqn.builder import TrainingState, apply_gradients, learning_rate_at, q_learning
from rl.lazy_tensorflow import import_without_tensorflow
from rl.networks.base import NetworkKind
from rl.networks.recurrent import RecurrentNetwork, lstm_state_spec
from rl.policies import EpsilonGreedy, Greedy
from rl.replay.kinds import Sequences
from rl.core import EnvironmentSpec

if TYPE_CHECKING:
    from rl.replay.adders import SequenceStep

# (params, observations (T, B, ...), state) -> (q_values (T, B, A), final state).
Unroll = Callable[[Any, Any, Any], tuple[jax.Array, Any]]


def rescale(x: jax.Array, epsilon: float) -> jax.Array:
    """h(x): squashes returns so one network fits values of very different sizes."""
    return import_without_tensorflow("rlax").signed_hyperbolic(x, epsilon)


def unrescale(x: jax.Array, epsilon: float) -> jax.Array:  # h^-1
    """h^-1(x), so that unrescale(rescale(x)) == x."""
    return import_without_tensorflow("rlax").signed_parabolic(x, epsilon)


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
    """y_t = h(G_t) for rows 0..T-2 of one trace (Q-values (T, A)), no gradient: G_t is the
    n-step return (rlax.n_step_bootstrapped_returns, gamma_t = gamma * d_t) bootstrapping
    from v = h^-1(Q'(o, argmax_a Q(o, a))) (double Q), cut short before a row with mask 0
    and at the trace's end. `rescaling_epsilon=None`: h is the identity."""
    rlax = import_without_tensorflow("rlax")
    transform = (lambda x: x) if rescaling_epsilon is None else (lambda x: rescale(x, rescaling_epsilon))
    inverse = (lambda x: x) if rescaling_epsilon is None else (lambda x: unrescale(x, rescaling_epsilon))
    selected = jnp.argmax(q_online[1:], axis=-1)
    values = inverse(jnp.take_along_axis(q_target[1:], selected[:, None], axis=-1)[:, 0])
    returns = rlax.n_step_bootstrapped_returns(
        rewards[:-1], gamma * discounts[:-1], values, n, lambda_t=mask[1:].astype(values.dtype)
    )
    return jax.lax.stop_gradient(transform(returns))


def burn_in_and_unroll(unroll: Unroll, params: Any, observations: Any, state: Any, burn_in: int) -> jax.Array:
    """Q-values of the trace rows (time-major); the first `burn_in` rows only warm the core
    state up from the stored `state` (no gradient through them)."""
    if burn_in > 0:
        _, state = unroll(params, jax.tree_util.tree_map(lambda x: x[:burn_in], observations), state)
        state = jax.lax.stop_gradient(state)
        observations = jax.tree_util.tree_map(lambda x: x[burn_in:], observations)
    return unroll(params, observations, state)[0]


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
    """L = mean_b w_b * 0.5 * sum_t (y_t - Q(o_t, a_t))^2 over each item's trained rows, both
    networks unrolled from the stored core state after the burn-in; `batch` is batch-major.
    A sum over time, as Acme's: the paper's Adam epsilon (1e-3) and clip (40) suit its size.
    Returns the loss and the metrics with each item's new priority."""
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
    loss = jnp.mean(weights * (0.5 * jnp.sum(mask * jnp.square(td), axis=0)))
    # p = eta * max_t |td_t| + (1 - eta) * mean_t |td_t| over each item's trained rows.
    abs_td = jnp.abs(td)
    largest = jnp.max(jnp.where(mask > 0, abs_td, 0.0), axis=0)
    mean_td = jnp.sum(abs_td * mask, axis=0) / jnp.maximum(jnp.sum(mask, axis=0), 1.0)
    priorities = jax.lax.stop_gradient(priority_eta * largest + (1.0 - priority_eta) * mean_td)
    metrics = {
        "loss": loss,
        "q_mean": jnp.sum(q_taken * mask) / jnp.maximum(jnp.sum(mask), 1.0),
        "td_error": jnp.sum(jnp.abs(td) * mask) / jnp.maximum(jnp.sum(mask), 1.0),
    }
    return loss, {"priorities": priorities, **metrics}


class R2D2Builder(ActorLearnerBuilder):
    network_kind = NetworkKind.RECURRENT_Q
    replay_kind = Sequences
    actor_class = RecurrentActor

    def extras_spec(self, environment_spec: EnvironmentSpec | None = None) -> dict[str, Any]:
        """The core state each step was acted from."""
        if self.config.core_state_size is None:
            raise ValueError("agent.core_state_size (the LSTM's units) must be set: r2d2 needs network=lstm")
        return {"core_state": lstm_state_spec(self.config.core_state_size)}

    def _check_network(self, networks: Any) -> None:
        if not isinstance(networks, RecurrentNetwork):
            raise ValueError(f"r2d2 needs a recurrent Q-network (network=lstm), got {type(networks).__name__}")
        shapes = {k: s.shape for k, s in networks.state_spec.items()}
        if shapes != {k: s.shape for k, s in self.extras_spec()["core_state"].items()}:
            raise ValueError(
                f"the network's core state {shapes} differs from the "
                f"one replay stores (agent.core_state_size={self.config.core_state_size})"
            )

    def make_policy(
        self, networks: RecurrentNetwork, environment_spec: EnvironmentSpec, evaluation: bool, head: Any = None
    ) -> RecurrentPolicy:
        """The policy acting with `head` (by default greedy when evaluating, else the exploration)."""
        self._check_network(networks)
        if head is None:
            head = Greedy() if evaluation else self.exploration

        def step(params: Any, key: jax.Array, observations: Any, state: Any, actor_step: jax.Array):
            q_values, next_state = networks.apply(params, observations, state)
            return head(q_values, key, actor_step), next_state

        return RecurrentPolicy(step, networks.initial_state, head.exploration_metrics)

    def make_actor_policy(
        self, networks: RecurrentNetwork, environment_spec: EnvironmentSpec, actor_id: int
    ) -> RecurrentPolicy:
        """With several actors each acts with its own Ape-X epsilon."""
        epsilon = self.config.actor_epsilon_of(actor_id)
        head = None if epsilon is None else EpsilonGreedy(epsilon_start=epsilon, epsilon_end=epsilon)
        return self.make_policy(networks, environment_spec, evaluation=False, head=head)

    def make_learning(self, network: RecurrentNetwork) -> Learning:
        self._check_network(network)
        config = self.config

        def sgd_step(optimizer: optax.GradientTransformation, state: TrainingState, batch: Batch):
            weights = normalized_weights(batch.importance_weights)
            rescaling = config.rescaling_epsilon if config.value_rescaling else None
            settings = (config.burn_in_length, config.discount, config.n_step, config.priority_eta, rescaling)
            gradients, extras = jax.grad(r2d2_loss, has_aux=True)(
                state.params, state.target_params, network.unroll, batch.data, weights, *settings
            )
            priorities = extras.pop("priorities")
            metrics = {
                **extras,
                "gradient_norm": optax.tree.norm(gradients),
                "learning_rate": learning_rate_at(config, state.steps),
            }
            return apply_gradients(optimizer, gradients, state, config.target_update_period), metrics, priorities

        return q_learning(network.init, sgd_step, config, config.prioritized)._replace(loss_terms=("loss", "td_error"))
