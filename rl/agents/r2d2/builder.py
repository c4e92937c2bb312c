"""R2D2 (Kapturowski et al., 2019): its loss on stored sequences, its learning and its
builder (prioritized sequence replay, recurrent actors; the optimiser, target copies and
priority writes are rl/agents/q_learning.py's).

Replay holds items of L = B + T rows (B burn-in rows, then the trace's T rows), one every
`sequence_period` rows of each environment copy; row t holds o_t, a_t, the reward r_t and
environment discount d_t received after a_t, mask_t (1 for a step actually taken, 0 for
an episode's final observation and the padding after it; rl/replay/sequences.py) and
the LSTM state the actor acted from (extras `{"core_state": ...}`). Q is the online
network, Q' the target network, gamma the discount, n the bootstrap length, and h the
value rescaling

    h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x,   h^-1 its inverse (rlax.signed_parabolic).

rlax is imported when a loss is traced, so building the builder (configuration checks)
loads neither rlax nor reverb.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import optax

from rl.agents.actors import RecurrentActor, RecurrentPolicy
from rl.agents.builder import SequenceReplayBuilder, TransitionReplayBuilder
from rl.agents.learning import Batch, Learning, normalized_weights
from rl.agents.q_learning import TrainingState, apply_gradients, learning_rate_at, q_learning
from rl.lazy_tensorflow import import_without_tensorflow
from rl.networks.recurrent import RecurrentNetwork, lstm_state_spec
from rl.policies import EpsilonGreedy, Greedy
from rl.specs import EnvironmentSpec

if TYPE_CHECKING:
    from rl.replay.sequences import SequenceStep

# (params, observations (T, B, ...), state) -> (q_values (T, B, A), final state).
Unroll = Callable[[Any, Any, Any], tuple[jax.Array, Any]]


def rescale(x: jax.Array, epsilon: float) -> jax.Array:
    """h(x): squashes returns so one network fits values of very different sizes."""
    return import_without_tensorflow("rlax").signed_hyperbolic(x, epsilon)


def unrescale(x: jax.Array, epsilon: float) -> jax.Array:
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
    """Targets y_t for rows t = 0..T-2 of one trace of T rows (Q-values (T, A)), no gradient.

    With a*_{t+1} = argmax_a Q(o_{t+1}, a) (double Q: the online network picks, the target
    network values), v_{t+1} = h^-1(Q'(o_{t+1}, a*_{t+1})), gamma_t = gamma * d_t and
    lambda_t = mask_{t+1}, the n-step return iterates n times

        G_t = r_t + gamma_t [(1 - lambda_t) v_{t+1} + lambda_t G_{t+1}]

    (rlax.n_step_bootstrapped_returns), so G_t = sum_{k<n} (prod_{j<k} gamma_{t+j}) r_{t+k}
    + (prod_{j<n} gamma_{t+j}) v_{t+n}, cut short to bootstrap from the final observation
    of an episode (lambda = 0 before a row where no step was taken; a termination's d = 0
    leaves only rewards, a time limit's d = 1 bootstraps) and from the trace's last row.
    Then y_t = h(G_t); `rescaling_epsilon=None` uses no rescaling (h = identity).
    """
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
    """Q-values of the trace rows (time-major): the first `burn_in` rows only warm the core
    state up from the stored `state`, and no gradient flows back through them."""
    if burn_in > 0:
        _, state = unroll(params, jax.tree_util.tree_map(lambda x: x[:burn_in], observations), state)
        state = jax.lax.stop_gradient(state)
        observations = jax.tree_util.tree_map(lambda x: x[burn_in:], observations)
    return unroll(params, observations, state)[0]


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
    first row and run the burn-in rows first.

    A sum over time, as in Acme's R2D2: the paper's Adam epsilon (1e-3) and gradient
    clip (40) are set for gradients of that size; a mean over the trace would shrink them
    T - 1 times and make epsilon dominate Adam's step.

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
    loss = jnp.mean(weights * (0.5 * jnp.sum(mask * jnp.square(td), axis=0)))
    priorities = jax.lax.stop_gradient(sequence_priorities(jnp.abs(td), mask, priority_eta))
    metrics = {
        "loss": loss,
        "q_mean": jnp.sum(q_taken * mask) / jnp.maximum(jnp.sum(mask), 1.0),
        "td_error": jnp.sum(jnp.abs(td) * mask) / jnp.maximum(jnp.sum(mask), 1.0),
    }
    return loss, {"priorities": priorities, **metrics}


class R2D2Builder(SequenceReplayBuilder, TransitionReplayBuilder):
    network_kind = "recurrent_q"
    actor_class = RecurrentActor

    def extras_spec(self, environment_spec: EnvironmentSpec | None = None) -> dict[str, Any]:
        """The core state each step was acted from."""
        if self.config.core_state_size is None:
            raise ValueError("agent.core_state_size (the LSTM's units) must be set: r2d2 needs network=lstm")
        return {"core_state": lstm_state_spec(self.config.core_state_size)}

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        from rl.replay.sequences import sequence_signature
        from rl.replay.tables import make_sequence_table

        signature = sequence_signature(environment_spec, self.config.sequence_length, self.extras_spec())
        return [
            make_sequence_table(
                self.config.replay_table_name,
                signature,
                max_size=self.config.max_replay_size,
                rate_limiter=self.replay_ratio.make_rate_limiter(),
                priority_exponent=self.config.priority_exponent,
            )
        ]

    def _check_network(self, networks: Any) -> None:
        if not isinstance(networks, RecurrentNetwork):
            raise ValueError(f"r2d2 needs a recurrent Q-network (network=lstm), got {type(networks).__name__}")
        shapes = {k: s.shape for k, s in networks.state_spec.items()}
        if shapes != {k: s.shape for k, s in self.extras_spec()["core_state"].items()}:
            raise ValueError(
                f"the network's core state {shapes} differs from the "
                f"one replay stores (agent.core_state_size={self.config.core_state_size})"
            )

    def _policy(self, networks: RecurrentNetwork, head: Any) -> RecurrentPolicy:
        self._check_network(networks)

        def step(params: Any, key: jax.Array, observations: Any, state: Any, actor_step: jax.Array):
            q_values, next_state = networks.apply(params, observations, state)
            return head(q_values, key, actor_step), next_state

        exploration = getattr(head, "exploration_metrics", None)
        return RecurrentPolicy(step=step, initial_state=networks.initial_state, exploration=exploration)

    def make_policy(
        self, networks: RecurrentNetwork, environment_spec: EnvironmentSpec, evaluation: bool
    ) -> RecurrentPolicy:
        return self._policy(networks, Greedy() if evaluation else self.exploration)

    def make_actor_policy(
        self, networks: RecurrentNetwork, environment_spec: EnvironmentSpec, actor_id: int
    ) -> RecurrentPolicy:
        """With several actors (launcher=ray) each acts epsilon-greedily with its own fixed
        Ape-X epsilon (`R2D2Config.actor_epsilon_of`)."""
        epsilon = self.config.actor_epsilon_of(actor_id)
        if epsilon is None:
            return self.make_policy(networks, environment_spec, evaluation=False)
        return self._policy(networks, EpsilonGreedy(epsilon_start=epsilon, epsilon_end=epsilon))

    def make_learning(self, network: RecurrentNetwork) -> Learning:
        """One SGD step per minibatch of sequences; its extras are the new priority per item."""
        self._check_network(network)
        config = self.config

        def sgd_step(optimizer: optax.GradientTransformation, state: TrainingState, batch: Batch):
            loss_fn = functools.partial(
                r2d2_loss,
                unroll=network.unroll,
                batch=batch.data,
                weights=normalized_weights(batch.importance_weights),
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
