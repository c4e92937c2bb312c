"""Actor-critic MLPs for continuous control (SAC, TD3, D4PG), conf/network/actor_critic_mlp.yaml:
each agent asks for the heads it needs (a deterministic or Gaussian policy, critics with
a Q-value or a categorical value distribution)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from rl.networks.base import FeedForwardNetwork, GaussianParams, flatten, mlp, transform, zeros_like_spec
from rl.specs import EnvironmentSpec, is_discrete

# Bounds of a Gaussian policy's log standard deviation (before the tanh squash).
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0


@dataclasses.dataclass(frozen=True)
class ActorCriticNetworks:
    """MLP policy and critic factories for one environment spec (actions in [-1, 1])."""

    environment_spec: EnvironmentSpec
    policy_hidden_sizes: tuple[int, ...] = (256, 256)
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    layer_norm: bool = False

    @property
    def action_size(self) -> int:
        return int(np.prod(self.environment_spec.actions.shape))

    def policy_network(self, stochastic: bool = False) -> FeedForwardNetwork:
        """`apply(params, observations)`: tanh actions (B, A), or `GaussianParams` if stochastic."""
        action_size = self.action_size

        def forward(observation: jax.Array):
            features = mlp(flatten(observation), self.policy_hidden_sizes, self.layer_norm)
            if not stochastic:
                return jnp.tanh(hk.Linear(action_size, name="action")(features))
            loc = hk.Linear(action_size, name="loc")(features)
            log_std = jnp.tanh(hk.Linear(action_size, name="log_std")(features))
            log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
            return GaussianParams(loc=loc, scale=jnp.exp(log_std))

        return transform(forward, zeros_like_spec(self.environment_spec.observations))

    def critic_network(self, num_critics: int = 1, num_outputs: int = 1) -> FeedForwardNetwork:
        """`apply(params, observations, actions)` -> (num_critics, B, num_outputs): independent
        MLPs on the observation and [-1, 1] action (twin critics for SAC and TD3, one with a
        logit per atom for D4PG)."""

        def forward(observation: jax.Array, action: jax.Array) -> jax.Array:
            inputs = jnp.concatenate([flatten(observation), flatten(action)], axis=-1)
            outputs = []
            for index in range(num_critics):
                features = mlp(inputs, self.critic_hidden_sizes, self.layer_norm)
                outputs.append(hk.Linear(num_outputs, name=f"critic_{index}_head")(features))
            return jnp.stack(outputs, axis=0)

        dummy_action = np.zeros((1, self.action_size), np.float32)
        return transform(forward, zeros_like_spec(self.environment_spec.observations), dummy_action)


def make_actor_critic_networks(
    environment_spec: EnvironmentSpec,
    policy_hidden_sizes: Sequence[int] = (256, 256),
    critic_hidden_sizes: Sequence[int] = (256, 256),
    layer_norm: bool = False,
) -> ActorCriticNetworks:
    """Policy and critic MLPs for a continuous (bounded) action spec."""
    if is_discrete(environment_spec.actions):
        raise ValueError(f"actor-critic networks need continuous actions, got {environment_spec.actions}")
    for name, sizes in (("policy_hidden_sizes", policy_hidden_sizes), ("critic_hidden_sizes", critic_hidden_sizes)):
        if any(int(size) <= 0 for size in sizes):
            raise ValueError(f"{name} must be positive, got {list(sizes)}")
    return ActorCriticNetworks(
        environment_spec=environment_spec,
        policy_hidden_sizes=tuple(int(s) for s in policy_hidden_sizes),
        critic_hidden_sizes=tuple(int(s) for s in critic_hidden_sizes),
        layer_norm=bool(layer_norm),
    )


make_actor_critic_networks.network_kind = "actor_critic"
