"""What the continuous-control agents (SAC, TD3, D4PG) share.

* Action rescaling between the networks' [-1, 1] and the environment's bounds, in one
  place: policies emit environment-scale actions (what replay stores) and learners map
  replayed actions back to [-1, 1].
* The pieces of their updates: the twin-critic target and loss, Polyak averaging, the
  optimisers and one optimiser step, fresh networks with their target copies.
* `ContinuousConfig`: the replay section and the optimisation settings every agent has.
* `ContinuousBuilder`: uniform n-step transition replay with a `SampleToInsertRatio`
  limiter, float32 feed-forward actors, behaviour/evaluation policies.
* `continuous_learning`: an agent's `Learning` (rl/agents/learning.py) on [-1, 1] actions.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl.agents.actors import Policy, with_exploration
from rl.agents.builder import TransitionReplayBuilder
from rl.agents.configs import ContinuousConfig
from rl.networks.actor_critic import ActorCriticNetworks
from rl.policies import Deterministic, GaussianNoise
from rl.specs import EnvironmentSpec, is_discrete

# --------------------------------------------------------------------------- rescaling


def action_bounds(action_spec: Any) -> tuple[np.ndarray, np.ndarray]:
    """Finite float32 (minimum, maximum) of a bounded continuous action spec."""
    if is_discrete(action_spec) or not hasattr(action_spec, "minimum"):
        raise ValueError(f"continuous-control agents need a bounded continuous action spec, got {action_spec}")
    low = np.broadcast_to(np.asarray(action_spec.minimum, np.float32), action_spec.shape)
    high = np.broadcast_to(np.asarray(action_spec.maximum, np.float32), action_spec.shape)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
        raise ValueError(f"action bounds must be finite with maximum > minimum, got {action_spec}")
    return low, high


def to_environment_scale(action: jax.Array, action_spec: Any) -> jax.Array:
    """Maps an action in [-1, 1] (clipped first) to the spec's [minimum, maximum]."""
    low, high = action_bounds(action_spec)
    action = jnp.clip(action, -1.0, 1.0)
    return (low + (action + 1.0) * 0.5 * (high - low)).astype(jnp.float32)


def to_network_scale(action: jax.Array, action_spec: Any) -> jax.Array:
    """Maps an action in the spec's [minimum, maximum] to [-1, 1] (the inverse of the above)."""
    low, high = action_bounds(action_spec)
    return jnp.clip(2.0 * (action - low) / (high - low) - 1.0, -1.0, 1.0).astype(jnp.float32)


# --------------------------------------------------------------------------- targets


def twin_critic_target(
    reward: jax.Array,
    discount: jax.Array,
    next_q_values: jax.Array,
    next_log_prob: jax.Array | None = None,
    entropy_temperature: jax.Array | float = 0.0,
) -> jax.Array:
    """`r + discount * (min_i Q_i(s', a') - alpha * log pi(a'|s'))`, without gradient.

    `next_q_values` is (num_critics, B): taking the smallest critic's value counters the
    overestimation a maximising policy exploits (clipped double-Q). `discount` already
    holds gamma^n times the environment discounts (see rl.types.Transition).
    """
    next_value = jnp.min(next_q_values, axis=0)
    if next_log_prob is not None:
        next_value = next_value - entropy_temperature * next_log_prob
    return jax.lax.stop_gradient(reward + discount * next_value)


def twin_critic_loss(q_values: jax.Array, target: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = 0.5 * sum_i mean_b (Q_i(s_b, a_b) - y_b)^2 over the critics i, with the critic
    metrics; `q_values` is (num_critics, B), `target` the (B,) targets y (no gradient)."""
    loss = 0.5 * jnp.mean(jnp.sum(jnp.square(q_values - target[None]), axis=0))
    return loss, {"critic_loss": loss, "q_mean": jnp.mean(q_values), "target_mean": jnp.mean(target)}


def polyak_update(online: Any, target: Any, tau: float) -> Any:
    """target <- tau * online + (1 - tau) * target."""
    return optax.incremental_update(online, target, tau)


def gradient_step(
    optimizer: optax.GradientTransformation, gradients: Any, opt_state: Any, params: Any
) -> tuple[Any, Any]:
    """One optimiser step: (new parameters, new optimiser state)."""
    updates, opt_state = optimizer.update(gradients, opt_state)
    return optax.apply_updates(params, updates), opt_state


def init_with_targets(
    policy: Any,
    critic: Any,
    policy_optimizer: optax.GradientTransformation,
    critic_optimizer: optax.GradientTransformation,
    policy_key: jax.Array,
    critic_key: jax.Array,
) -> dict[str, Any]:
    """The training-state fields of a deterministic actor-critic (TD3, D4PG): fresh policy
    and critic parameters, target networks starting as copies of them, fresh optimisers."""
    policy_params = policy.init(policy_key)
    critic_params = critic.init(critic_key)
    return dict(
        policy_params=policy_params,
        target_policy_params=policy_params,
        critic_params=critic_params,
        target_critic_params=critic_params,
        policy_opt_state=policy_optimizer.init(policy_params),
        critic_opt_state=critic_optimizer.init(critic_params),
    )


def make_optimizer(learning_rate: float, max_gradient_norm: float | None) -> optax.GradientTransformation:
    adam = optax.adam(learning_rate)
    if max_gradient_norm is None:
        return adam
    return optax.chain(optax.clip_by_global_norm(max_gradient_norm), adam)


def make_optimizers(config: ContinuousConfig) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """(policy optimiser, critic optimiser): Adam at each network's learning rate, both
    clipped by `max_gradient_norm`."""
    return (
        make_optimizer(config.policy_learning_rate, config.max_gradient_norm),
        make_optimizer(config.critic_learning_rate, config.max_gradient_norm),
    )


def learning_rates(config: ContinuousConfig) -> dict[str, jax.Array]:
    """The step sizes Adam applies to the policy and the critic (constants: these agents
    have no schedule), as learner metrics: the logs name every rate a run trained with."""
    return {
        "policy_learning_rate": jnp.asarray(config.policy_learning_rate, jnp.float32),
        "critic_learning_rate": jnp.asarray(config.critic_learning_rate, jnp.float32),
    }


# --------------------------------------------------------------------------- config


# --------------------------------------------------------------------------- builder


class ContinuousBuilder(TransitionReplayBuilder):
    """Replay, adder, actor and policies for an actor-critic agent; subclasses add the learner."""

    action_kind = "continuous"
    network_kind = "actor_critic"
    anakin = "off_policy"
    # Whether the agent's policy network is a tanh-Gaussian (SAC) or deterministic (TD3, D4PG).
    stochastic_policy = False

    action_dtype = np.float32

    def __init__(self, config: ContinuousConfig, exploration: Any = None):
        super().__init__(config, exploration if exploration is not None else self.default_exploration())
        if getattr(self.exploration, "needs_stochastic_policy", False) and not self.stochastic_policy:
            raise ValueError(
                f"{type(self).__name__} has a deterministic policy network, which policy="
                f"{type(self.exploration).__name__.lower()} cannot sample; use policy=gaussian_noise"
            )

    def default_exploration(self) -> Any:
        return GaussianNoise()

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        action_bounds(environment_spec.actions)  # Refuse unbounded actions before anything runs.
        return super().make_replay_tables(environment_spec)

    def make_policy(self, networks: ActorCriticNetworks, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        head = Deterministic() if evaluation else self.exploration
        policy_network = networks.policy_network(stochastic=self.stochastic_policy)
        action_spec = environment_spec.actions
        action_bounds(action_spec)

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            output = policy_network.apply(params, observations)
            return to_environment_scale(head(output, key, step), action_spec)

        return with_exploration(policy, head)


# --------------------------------------------------------------------------- learning


def continuous_learning(
    init: Callable[[jax.Array], Any], sgd_step: Any, config: ContinuousConfig, action_spec: Any
) -> Any:
    """The `Learning` of an actor-critic agent: `sgd_step(state, transitions)` sees the
    replayed (environment-scale) actions mapped back to [-1, 1]; the policy acts with
    `state.policy_params`."""
    from rl.agents.learning import Learning

    def step(state: Any, batch: Any) -> tuple[Any, dict[str, jax.Array], None]:
        data = batch.data._replace(action=to_network_scale(batch.data.action, action_spec))
        return (*sgd_step(state, data), None)

    return Learning(
        init=init,
        sgd_step=step,
        policy_params=lambda state: state.policy_params,
        sgd_steps_per_learner_step=config.sgd_steps_per_learner_step,
    )
