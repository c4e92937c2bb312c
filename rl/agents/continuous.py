"""What SAC, TD3 and D4PG share: action rescaling between the networks' [-1, 1] and the
environment's bounds (replay stores environment-scale actions), twin critics, target networks,
optimisers, and `ContinuousBuilder` with `continuous_learning`."""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from dm_env import specs

from rl.agents.actors import with_exploration
from rl.agents.builder import ActorLearnerBuilder
from rl.systems.base import Policy
from rl.systems.learning import Learning
from rl.agents.configs import ContinuousConfig
from rl.agents.normalisation import RunningStatistics, init_statistics, normalize_observations, update_statistics
from rl.networks.base import ActorCriticNetworks, NetworkKind
from rl.policies import Deterministic, GaussianNoise, Stochastic
from rl.core import EnvironmentSpec, is_discrete
from rl.systems.off_policy import OffPolicySystem

# The training-state fields of a deterministic actor-critic with target networks (TD3, D4PG).
TARGET_FIELDS = (
    "policy_params",
    "target_policy_params",
    "critic_params",
    "target_critic_params",
    "policy_opt_state",
    "critic_opt_state",
)


def action_bounds(action_spec: Any) -> tuple[np.ndarray, np.ndarray]:
    """Finite float32 (minimum, maximum) of a bounded continuous action spec."""
    if is_discrete(action_spec) or not isinstance(action_spec, specs.BoundedArray):
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
    """The inverse: an action in the spec's [minimum, maximum] to [-1, 1]."""
    low, high = action_bounds(action_spec)
    return jnp.clip(2.0 * (action - low) / (high - low) - 1.0, -1.0, 1.0).astype(jnp.float32)


def twin_critic_target(
    reward: jax.Array,
    discount: jax.Array,
    next_q_values: jax.Array,
    next_log_prob: jax.Array | None = None,
    entropy_temperature: jax.Array | float = 0.0,
) -> jax.Array:
    """`r + discount * (min_i Q_i(s', a') - alpha * log pi(a'|s'))`, without gradient;
    `next_q_values` is (num_critics, B): the smallest counters overestimation."""
    next_value = jnp.min(next_q_values, axis=0)
    if next_log_prob is not None:
        next_value = next_value - entropy_temperature * next_log_prob
    return jax.lax.stop_gradient(reward + discount * next_value)


def twin_critic_loss(q_values: jax.Array, target: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = 0.5 * sum_i mean_b (Q_i(s_b, a_b) - y_b)^2 for (num_critics, B) `q_values`, and metrics."""
    loss = 0.5 * jnp.mean(jnp.sum(jnp.square(q_values - target[None]), axis=0))
    return loss, {"critic_loss": loss, "q_mean": jnp.mean(q_values), "target_mean": jnp.mean(target)}


def optimizer_step(optimizer: optax.GradientTransformation, gradients: Any, params: Any, opt_state: Any) -> Any:
    """(params, opt_state) after one optimiser step."""
    updates, opt_state = optimizer.update(gradients, opt_state)
    return optax.apply_updates(params, updates), opt_state


def step_policy(state: Any, optimizer: optax.GradientTransformation, gradients: Any) -> Any:
    """`state` after one optimiser step of its policy network."""
    params, opt_state = optimizer_step(optimizer, gradients, state.policy_params, state.policy_opt_state)
    return state._replace(policy_params=params, policy_opt_state=opt_state)


def step_critic(state: Any, optimizer: optax.GradientTransformation, gradients: Any) -> Any:
    """`state` after one optimiser step of its critic network."""
    params, opt_state = optimizer_step(optimizer, gradients, state.critic_params, state.critic_opt_state)
    return state._replace(critic_params=params, critic_opt_state=opt_state)


def update_targets(state: Any, tau: float) -> Any:
    """`state` with both target networks moved a Polyak step `tau` towards the current ones."""
    return state._replace(
        target_policy_params=optax.incremental_update(state.policy_params, state.target_policy_params, tau),
        target_critic_params=optax.incremental_update(state.critic_params, state.target_critic_params, tau),
    )


def init_state(state_class: type, policy: Any, critic: Any, optimizers: tuple[Any, Any], keys: Any, **rest: Any) -> Any:
    """A `state_class` of fresh networks, targets copying them, fresh optimisers (the `TARGET_FIELDS`
    it has), `rest` and 0 steps."""
    policy_params = policy.init(keys[0])
    critic_params = critic.init(keys[1])
    opt_states = (optimizers[0].init(policy_params), optimizers[1].init(critic_params))
    fields = dict(zip(TARGET_FIELDS, (policy_params, policy_params, critic_params, critic_params, *opt_states)))
    fields = {name: value for name, value in fields.items() if name in state_class._fields}
    return state_class(**fields, **rest, steps=jnp.zeros((), jnp.int32))


def deterministic_policy_loss(policy: Any, critic: Any, value: Callable[[jax.Array], jax.Array]) -> Callable[..., Any]:
    """`loss(policy_params, critic_params, observation) = -E[value(critic(s, pi(s)))]`, the
    deterministic policy gradient through the critic's read-out `value`."""

    def loss(policy_params: Any, critic_params: Any, observation: jax.Array) -> jax.Array:
        action = policy.apply(policy_params, observation)
        return -jnp.mean(value(critic.apply(critic_params, observation, action)))

    return loss


def make_optimizers(config: ContinuousConfig) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """(policy, critic) Adam optimisers, both clipped by `max_gradient_norm` (if set)."""

    def make(learning_rate: float) -> optax.GradientTransformation:
        if config.max_gradient_norm is None:
            return optax.adam(learning_rate)
        return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), optax.adam(learning_rate))

    return make(config.policy_learning_rate), make(config.critic_learning_rate)


def learning_rates(config: ContinuousConfig) -> dict[str, jax.Array]:
    """The (constant) learning rates, as learner metrics."""
    rates = {"policy_learning_rate": config.policy_learning_rate, "critic_learning_rate": config.critic_learning_rate}
    return {name: jnp.asarray(rate, jnp.float32) for name, rate in rates.items()}


class ContinuousBuilder(ActorLearnerBuilder):
    """Replay, adder, actor and policies for an actor-critic agent; subclasses add the learning."""

    action_kind = "continuous"
    network_kind = NetworkKind.ACTOR_CRITIC
    compiled_system = OffPolicySystem
    default_exploration = GaussianNoise
    # Whether the policy network is a tanh-Gaussian (SAC) or deterministic (TD3, D4PG).
    stochastic_policy = False

    def __init__(self, config: ContinuousConfig, exploration: Any = None):
        super().__init__(config, exploration)
        if isinstance(self.exploration, Stochastic) and not self.stochastic_policy:
            raise ValueError(
                f"{type(self).__name__} has a deterministic policy network, which policy="
                f"{type(self.exploration).__name__.lower()} cannot sample; use policy=gaussian_noise"
            )

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        action_bounds(environment_spec.actions)  # Refuse unbounded actions before anything runs.
        return super().make_replay_tables(environment_spec)

    def make_policy(self, networks: ActorCriticNetworks, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        head = Deterministic() if evaluation else self.exploration
        policy_network = networks.policy_network(stochastic=self.stochastic_policy)
        action_spec = environment_spec.actions
        action_bounds(action_spec)

        clip = self.config.observation_clip if self.config.normalize_observations else None

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            if clip is not None:  # The parameters are (network parameters, observation statistics).
                params, statistics = params
                observations = normalize_observations(statistics, observations, clip)
            output = policy_network.apply(params, observations)
            return to_environment_scale(head(output, key, step), action_spec)

        return with_exploration(policy, head)


class NormalisedState(NamedTuple):
    """A learner state and the running statistics of the observations it normalises (`normalize_observations`)."""

    learner: Any
    observation_statistics: RunningStatistics

    @property
    def steps(self) -> jax.Array:
        """The SGD steps taken (what `Learning` reads of every state)."""
        return self.learner.steps


def continuous_learning(
    init: Callable, sgd_step: Any, config: ContinuousConfig, environment_spec: EnvironmentSpec
) -> Learning:
    """The `Learning` whose `sgd_step(state, transitions)` sees the replayed actions mapped back to [-1, 1]; the
    policy acts with `state.policy_params`. With `config.normalize_observations` the state is a `NormalisedState`:
    each batch's observations update the statistics first, then both its observations and next observations are
    normalised by them, and the policy's parameters carry the statistics (`make_policy` normalises alike)."""
    action_spec = environment_spec.actions

    def step(state: Any, batch: Any) -> tuple[Any, dict[str, jax.Array], None]:
        data = batch.data._replace(action=to_network_scale(batch.data.action, action_spec))
        return (*sgd_step(state, data), None)

    def normalised_step(state: NormalisedState, batch: Any) -> tuple[NormalisedState, dict[str, jax.Array], None]:
        data = batch.data
        mask = jnp.ones(jax.tree_util.tree_leaves(data.observation)[0].shape[:1], jnp.float32)
        statistics = update_statistics(state.observation_statistics, data.observation, mask)
        normalise = functools.partial(normalize_observations, statistics, clip=config.observation_clip)
        data = data._replace(observation=normalise(data.observation), next_observation=normalise(data.next_observation))
        learner, metrics, _ = step(state.learner, batch._replace(data=data))
        return NormalisedState(learner, statistics), metrics, None

    common = {
        "sgd_steps_per_learner_step": config.sgd_steps_per_learner_step,
        "loss_terms": ("critic_loss", "policy_loss", "temperature_loss"),
    }
    if not config.normalize_observations:
        return Learning(init=init, sgd_step=step, policy_params=lambda state: state.policy_params, **common)
    return Learning(
        init=lambda key: NormalisedState(init(key), init_statistics(environment_spec.observations)),
        sgd_step=normalised_step,
        policy_params=lambda state: (state.learner.policy_params, state.observation_statistics),
        **common,
    )
