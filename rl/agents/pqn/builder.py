"""PQN: the Q(lambda) targets and the Q loss as pure functions, the learner update (targets once per batch,
then epochs of minibatch updates, no target network) and the builder. A batch is `SequenceStep` sequences
of L rows: o_t, a_t, r_t, d_t (0 where the episode ended after a_t) and m_t (1 for a step taken); the last
row of a rollout only bootstraps."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rl.agents import on_policy
from rl.agents.actors import with_exploration
from rl.agents.builder import ActorLearnerBuilder
from rl.systems.base import Policy
from rl.systems.learning import Learning
from rl.agents.on_policy import masked_mean
from rl.core import EnvironmentSpec
from rl.networks.base import FeedForwardNetwork
from rl.policies import Greedy
from rl.replay.kinds import Queue
from rl.systems.base import CompiledAgent
from rl.systems.on_policy import OnPolicySystem

if TYPE_CHECKING:
    from rl.replay.adders import SequenceStep


def q_lambda_targets(
    rewards: jax.Array, discounts: jax.Array, values: jax.Array, mask: jax.Array, gamma: float, lambda_: float
) -> jax.Array:
    """The Q(lambda) targets G_t of rows t = 0..L-2 of one sequence of L rows, with v_t = max_a Q(s_t, a):
    G_t = r_t + gamma * d_t * ((1 - l_{t+1}) v_{t+1} + l_{t+1} G_{t+1}), l_{t+1} = lambda * m_{t+1}, and
    G_{L-1} = v_{L-1}. d_t = 0 stops the return at an episode's end (launcher=anakin folds a truncation's
    gamma * v(s_final) into its r_t); l_{t+1} = 0 bootstraps from v_{t+1} alone where row t+1 took no step
    (launcher=local's row of an episode's final observation)."""

    def backward(next_return: jax.Array, row: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        reward, discount, next_value, next_lambda = row
        target = reward + gamma * discount * ((1.0 - next_lambda) * next_value + next_lambda * next_return)
        return target, target

    rows = (rewards[:-1], discounts[:-1], values[1:], lambda_ * mask[1:])
    _, targets = jax.lax.scan(backward, values[-1], rows, reverse=True)
    return targets


def chosen_q_values(q_values: jax.Array, actions: jax.Array) -> jax.Array:
    """Q(s_t, a_t): a select and a sum rather than a gather, which accelerators run far slower."""
    taken = jnp.arange(q_values.shape[-1]) == actions[..., None].astype(jnp.int32)
    return jnp.sum(jnp.where(taken, q_values, 0.0), axis=-1)


def q_loss(q_values: jax.Array, actions: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """L = mean_t 0.5 * (Q(s_t, a_t) - G_t)^2 over the rows with m_t = 1; the targets G_t are held fixed."""
    error = chosen_q_values(q_values, actions) - jax.lax.stop_gradient(targets)
    return 0.5 * masked_mean(jnp.square(error), mask)


class Minibatch(NamedTuple):
    """Steps (a flat leading axis) with their targets."""

    observation: Any
    action: jax.Array
    target: jax.Array
    mask: jax.Array


class TrainingState(NamedTuple):
    params: Any
    opt_state: Any
    key: jax.Array
    steps: jax.Array  # Learner steps (batches) taken.
    actor_steps: jax.Array  # Actor steps trained on: the learning rate's clock.


def prepare_minibatches(
    apply: Callable[[Any, Any], jax.Array], params: Any, batch: SequenceStep, config: Any, key: jax.Array
) -> tuple[Minibatch, jax.Array, dict[str, jax.Array]]:
    """The batch's steps with their Q(lambda) targets (from the parameters before this batch's updates), the
    rows of every minibatch (`on_policy.minibatch_orders`) and batch metrics."""
    num_sequences, length = batch.mask.shape
    flat = lambda x: jnp.reshape(x, (num_sequences * length,) + x.shape[2:])
    q_values = apply(params, jax.tree_util.tree_map(flat, batch.observation))
    values = jnp.reshape(jnp.max(q_values, axis=-1), (num_sequences, length))
    targets = jax.vmap(functools.partial(q_lambda_targets, gamma=config.discount, lambda_=config.q_lambda))(
        batch.reward, batch.discount, values, batch.mask
    )
    count = num_sequences * (length - 1)
    steps_of = lambda x: jnp.reshape(x, (count,) + x.shape[2:])  # (B, L - 1, ...) -> (B * (L - 1), ...)
    trained = lambda x: steps_of(x[:, :-1])  # The rows trained on: all but each sequence's last.
    steps = Minibatch(
        observation=jax.tree_util.tree_map(trained, batch.observation),
        action=trained(batch.action),
        target=jax.lax.stop_gradient(steps_of(targets)),
        mask=trained(batch.mask),
    )
    orders = on_policy.minibatch_orders(key, count, config.num_epochs, config.num_minibatches)
    metrics = {"steps_in_batch": jnp.sum(steps.mask), "target_mean": masked_mean(steps.target, steps.mask)}
    return steps, orders, metrics


def pqn_update(
    apply: Callable[[Any, Any], jax.Array],
    optimizer: optax.GradientTransformation,
    config: Any,
    state: TrainingState,
    batch: SequenceStep,
) -> tuple[TrainingState, dict[str, jax.Array], None]:
    """One learner step: the batch's Q(lambda) targets, then one `lax.scan` of SGD steps on the Q loss over
    every epoch's minibatches, at the scheduled learning rate."""
    key, shuffle_key = jax.random.split(state.key)
    learning_rate = on_policy.scheduled(
        config, state.actor_steps, config.learning_rate, config.final_learning_rate_fraction
    )
    steps, orders, batch_metrics = prepare_minibatches(apply, state.params, batch, config, shuffle_key)
    gather = on_policy.row_gatherer(steps)  # Each minibatch one gather of rows.

    def minibatch_loss(params: Any, minibatch: Minibatch) -> tuple[jax.Array, jax.Array]:
        q_values = apply(params, minibatch.observation)
        loss = q_loss(q_values, minibatch.action, minibatch.target, minibatch.mask)
        return loss, masked_mean(chosen_q_values(q_values, minibatch.action), minibatch.mask)

    def sgd_step(carry: tuple[Any, Any], order: jax.Array) -> tuple[tuple[Any, Any], dict[str, jax.Array]]:
        params, opt_state = carry
        (loss, q_mean), gradients = jax.value_and_grad(minibatch_loss, has_aux=True)(params, gather(order))
        updates, opt_state = optimizer.update(gradients, opt_state, params)
        params = optax.apply_updates(params, jax.tree_util.tree_map(lambda u: -learning_rate * u, updates))
        return (params, opt_state), {"loss": loss, "q_mean": q_mean, "gradient_norm": optax.tree.norm(gradients)}

    (params, opt_state), metrics = jax.lax.scan(sgd_step, (state.params, state.opt_state), orders)
    metrics = {**jax.tree_util.tree_map(jnp.mean, metrics), **batch_metrics, "learning_rate": learning_rate}
    actor_steps = state.actor_steps + on_policy.steps_taken(batch)
    return TrainingState(params, opt_state, key, state.steps + 1, actor_steps), metrics, None


class PQNBuilder(ActorLearnerBuilder):
    """Epsilon-greedy actors write rollouts into a queue (launcher=local, ray) or the compiled on-policy
    system makes them (launcher=anakin); the learner trains on each once. The exploration is the
    `policy` group's head (epsilon_greedy: epsilon decays with the actor steps)."""

    compiled_system = OnPolicySystem
    replay_kind = Queue

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """`(params, key, observations, step) -> (actions, {})`: the head on the Q-values (greedy when evaluating)."""
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> tuple[jax.Array, dict]:
            return head(networks.apply(params, observations), key, step), {}

        return with_exploration(policy, head)

    def compiled_agent(self, network: FeedForwardNetwork, environment_spec: EnvironmentSpec) -> CompiledAgent:
        """Its bootstrap value is max_a Q(s, a); its learning rate's clock, the actor steps trained on."""
        agent = super().compiled_agent(network, environment_spec)
        value = lambda state, observations: jnp.max(network.apply(state.params, observations), axis=-1)
        return dataclasses.replace(agent, bootstrap_value=value, clock=lambda state: state.actor_steps)

    def make_learning(self, network: FeedForwardNetwork) -> Learning:
        config = self.config
        # `pqn_update` applies the scheduled step size.
        optimizer = optax.chain(
            optax.clip_by_global_norm(config.max_gradient_norm), optax.scale_by_radam(eps=config.radam_eps)
        )

        def init(random_key: jax.Array) -> TrainingState:
            init_key, key = jax.random.split(random_key)
            params = network.init(init_key)
            zero = jnp.zeros((), jnp.int32)
            return TrainingState(params, optimizer.init(params), key, steps=zero, actor_steps=zero)

        return Learning(
            init=init,
            sgd_step=lambda state, batch: pqn_update(network.apply, optimizer, config, state, batch.data),
            policy_params=lambda state: state.params,
            loss_terms=("loss", "q_mean"),
        )
