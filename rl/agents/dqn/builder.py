"""DQN: the double-DQN loss on n-step transitions, its learning and its builder (the
optimiser, target network and priorities are rl/agents/q_learning.py's)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from rl.agents.actors import Policy, with_exploration
from rl.agents.builder import TransitionReplayBuilder
from rl.agents.learning import Batch, Learning, normalized_weights
from rl.agents.q_learning import TrainingState, apply_gradients, learning_rate_at, q_learning
from rl.networks.base import FeedForwardNetwork
from rl.policies import Greedy
from rl.specs import EnvironmentSpec
from rl.types import Transition


def double_q_loss(
    params: Any,
    target_params: Any,
    apply: Callable[[Any, Any], jax.Array],
    batch: Transition,
    weights: jax.Array,
    huber_loss_delta: float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = mean_b w_b * huber(delta_b), delta = r + discount * Q'(s', argmax_a Q(s', a)) - Q(s, a):
    the online network Q picks the next action and the target Q' values it (no gradient),
    which removes most of Q-learning's overestimation; huber(x) is x^2 / 2 for |x| <= delta
    and delta * (|x| - delta / 2) beyond. Also returns the per-item |delta| (priorities).
    Written out rather than taken from rlax, whose import costs seconds of start-up."""
    q_tm1 = apply(params, batch.observation)
    next_action = jnp.argmax(apply(params, batch.next_observation), axis=-1)
    next_value = jnp.take_along_axis(apply(target_params, batch.next_observation), next_action[:, None], axis=-1)[:, 0]
    target = jax.lax.stop_gradient(batch.reward + batch.discount * next_value)
    td_error = target - jnp.take_along_axis(q_tm1, batch.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    loss = jnp.mean(weights * optax.huber_loss(td_error, delta=huber_loss_delta))
    return loss, {"abs_td_error": jnp.abs(td_error), "q_mean": jnp.mean(q_tm1)}


class DQNBuilder(TransitionReplayBuilder):
    anakin = "off_policy"

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            return head(networks.apply(params, observations), key, step)

        return with_exploration(policy, head)

    def make_learning(self, network: FeedForwardNetwork) -> Learning:
        """Each SGD step sees its slice of the batch with its importance weights (all 1 unless
        prioritized); the sampled items' priorities become their absolute TD errors."""
        config = self.config

        def sgd_step(optimizer: optax.GradientTransformation, state: TrainingState, batch: Batch):
            weights = normalized_weights(batch.importance_weights)
            gradients, extras = jax.grad(double_q_loss, has_aux=True)(
                state.params, state.target_params, network.apply, batch.data, weights, config.huber_loss_delta
            )
            metrics = {
                "gradient_norm": optax.global_norm(gradients),
                "learning_rate": learning_rate_at(config, state.steps),
                "q_mean": extras["q_mean"],
                "td_error": jnp.mean(extras["abs_td_error"]),
            }
            state = apply_gradients(optimizer, gradients, state, config.target_update_period)
            return state, metrics, extras["abs_td_error"]

        return q_learning(network.init, sgd_step, config, config.prioritized)
