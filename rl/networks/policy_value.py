"""Policy-and-value networks for the on-policy agents (PPO, IMPALA), and the distribution
helpers their policies and losses use. `apply(params, observations)` gives
`(policy_output, value)`: (B, num_actions) logits, or a `GaussianParams` in [-1, 1]
action units with a state-independent learned log std; and a (B,) value.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from rl.networks.base import (
    FeedForwardNetwork,
    GaussianParams,
    flatten,
    mlp,
    policy_head,
    transform,
    value_head,
    zeros_like_spec,
)
from rl.specs import EnvironmentSpec, is_discrete

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu}


@dataclasses.dataclass(frozen=True)
class PolicyValueNetwork(FeedForwardNetwork):
    """A network that also names the observation spec it reads (for learners that keep
    statistics of the observations, to normalise them)."""

    observation_spec: Any = None


def make_policy_value_network(
    environment_spec: EnvironmentSpec,
    policy_hidden_sizes: Sequence[int] = (64, 64),
    value_hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    initial_log_std: float = 0.0,
) -> PolicyValueNetwork:
    """Separate policy and value MLPs over the flattened observation, hidden layers
    orthogonally initialised (gain sqrt(2)), the usual PPO initialisation."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    for name, sizes in (("policy_hidden_sizes", policy_hidden_sizes), ("value_hidden_sizes", value_hidden_sizes)):
        if any(int(size) <= 0 for size in sizes):
            raise ValueError(f"{name} must be positive, got {list(sizes)}")
    actions = environment_spec.actions
    if not is_discrete(actions) and not np.issubdtype(np.dtype(actions.dtype), np.floating):
        raise ValueError(f"policy-value networks need discrete or float actions, got {actions}")
    layers = dict(activation=ACTIVATIONS[activation], w_init=hk.initializers.Orthogonal(np.sqrt(2.0)))

    def forward(observation: jax.Array) -> tuple[Any, jax.Array]:
        inputs = flatten(observation)
        policy_output = policy_head(mlp(inputs, policy_hidden_sizes, **layers), actions, initial_log_std)
        return policy_output, value_head(mlp(inputs, value_hidden_sizes, **layers))

    return policy_value_network(forward, environment_spec)


def policy_value_network(forward: Any, environment_spec: EnvironmentSpec) -> PolicyValueNetwork:
    network = transform(forward, zeros_like_spec(environment_spec.observations))
    return PolicyValueNetwork(network.init, network.apply, observation_spec=environment_spec.observations)


make_policy_value_network.network_kind = "policy_value"

# Distributions written out rather than built with distrax: importing distrax loads
# TensorFlow Probability's JAX substrate (seconds of start-up) for a few lines of arithmetic.
LOG_2PI = math.log(2.0 * math.pi)


def policy_mode(policy_output: Any) -> jax.Array:
    """The most likely action: argmax of the logits (int32), or the Gaussian's mean."""
    if isinstance(policy_output, GaussianParams):
        return policy_output.loc
    return jnp.argmax(policy_output, axis=-1).astype(jnp.int32)


def log_prob(policy_output: Any, action: jax.Array) -> jax.Array:
    """log pi(action | observation): log_softmax(logits)[a], or for a diagonal Gaussian
    -sum_i [ ((a_i - mu_i) / sigma_i)^2 / 2 + log sigma_i + log(2 pi) / 2 ]."""
    if isinstance(policy_output, GaussianParams):
        z = (action - policy_output.loc) / policy_output.scale
        return -jnp.sum(0.5 * jnp.square(z) + jnp.log(policy_output.scale) + 0.5 * LOG_2PI, axis=-1)
    log_probs = jax.nn.log_softmax(policy_output, axis=-1)
    return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def entropy(policy_output: Any) -> jax.Array:
    """-sum_a p_a log p_a, or for a diagonal Gaussian sum_i [ log sigma_i + (1 + log(2 pi)) / 2 ]."""
    if isinstance(policy_output, GaussianParams):
        return jnp.sum(jnp.log(policy_output.scale) + 0.5 * (1.0 + LOG_2PI), axis=-1)
    log_probs = jax.nn.log_softmax(policy_output, axis=-1)
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def sample_with_log_prob(policy_output: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """An action drawn from the policy (int32, or mu + sigma * N(0, 1)) and its log-probability."""
    if isinstance(policy_output, GaussianParams):
        noise = jax.random.normal(key, policy_output.loc.shape, policy_output.loc.dtype)
        action = policy_output.loc + policy_output.scale * noise
    else:
        action = jax.random.categorical(key, policy_output, axis=-1).astype(jnp.int32)
    return action, log_prob(policy_output, action)
