"""Policy-and-value MLPs for on-policy actor-critic agents (PPO; IMPALA can reuse them).

`make_policy_value_network` (conf/network/policy_value_mlp.yaml) returns one
`FeedForwardNetwork` whose `apply(params, observations)` gives `(policy_output, value)`:

* discrete actions: the policy output is a (B, num_actions) array of logits;
* continuous actions: a `GaussianParams` in the network's [-1, 1] action units, with a
  state-independent log standard deviation (a learned vector, as in PPO's paper).

The value is a (B,) array. The distribution helpers below turn a policy output into what
an agent needs: a sample with its log-probability (behaviour), the mode (evaluation),
log-probabilities of stored actions and the entropy (the losses).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from rl.networks.base import FeedForwardNetwork, zeros_like_spec
from rl.networks.distributions import GaussianParams
from rl.specs import EnvironmentSpec, is_discrete

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu}


def _flatten(observation: jax.Array) -> jax.Array:
    return jnp.reshape(observation, (observation.shape[0], -1)).astype(jnp.float32)


def _mlp(hidden_sizes: Sequence[int], activation: Any, name: str) -> hk.Sequential:
    """Orthogonally initialised hidden layers (gain sqrt(2)), the usual PPO initialisation."""
    layers: list[Any] = []
    for size in hidden_sizes:
        layers += [hk.Linear(size, w_init=hk.initializers.Orthogonal(np.sqrt(2.0))), activation]
    return hk.Sequential(layers, name=name)


@dataclasses.dataclass(frozen=True)
class PolicyValueNetwork(FeedForwardNetwork):
    """`init`/`apply` as any network, plus the observation spec it reads (for learners
    that keep statistics of the observations, e.g. to normalise them)."""

    observation_spec: Any = None


def make_policy_value_network(
    environment_spec: EnvironmentSpec,
    policy_hidden_sizes: Sequence[int] = (64, 64),
    value_hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    initial_log_std: float = 0.0,
) -> PolicyValueNetwork:
    """Separate policy and value MLPs over the flattened observation.

    The policy head starts with small weights (orthogonal, gain 0.01): the initial policy
    is close to uniform (discrete) or to N(0, exp(initial_log_std)^2) (continuous). The
    value head uses gain 1.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    for name, sizes in (("policy_hidden_sizes", policy_hidden_sizes), ("value_hidden_sizes", value_hidden_sizes)):
        if any(int(size) <= 0 for size in sizes):
            raise ValueError(f"{name} must be positive, got {list(sizes)}")
    act = ACTIVATIONS[activation]
    actions = environment_spec.actions
    discrete = is_discrete(actions)
    if not discrete and not np.issubdtype(np.dtype(actions.dtype), np.floating):
        raise ValueError(f"policy-value networks need discrete or float actions, got {actions}")
    num_outputs = int(actions.num_values) if discrete else int(np.prod(actions.shape))
    policy_sizes = tuple(int(s) for s in policy_hidden_sizes)
    value_sizes = tuple(int(s) for s in value_hidden_sizes)

    def forward(observation: jax.Array) -> tuple[Any, jax.Array]:
        inputs = _flatten(observation)
        features = _mlp(policy_sizes, act, "policy_torso")(inputs)
        head = hk.Linear(num_outputs, w_init=hk.initializers.Orthogonal(0.01), name="policy_head")(features)
        if discrete:
            policy_output: Any = head
        else:
            log_std = hk.get_parameter("log_std", (num_outputs,), init=hk.initializers.Constant(initial_log_std))
            policy_output = GaussianParams(loc=head, scale=jnp.broadcast_to(jnp.exp(log_std), head.shape))
        value_features = _mlp(value_sizes, act, "value_torso")(inputs)
        value = hk.Linear(1, w_init=hk.initializers.Orthogonal(1.0), name="value_head")(value_features)
        return policy_output, value[:, 0]

    transformed = hk.without_apply_rng(hk.transform(forward))
    dummy = zeros_like_spec(environment_spec.observations)
    # Jitted: the orthogonal initialisers run as one compiled program (cached across runs),
    # not as dozens of eagerly dispatched operations.
    init = jax.jit(lambda key: transformed.init(key, dummy))
    return PolicyValueNetwork(init=init, apply=transformed.apply, observation_spec=environment_spec.observations)


make_policy_value_network.network_kind = "policy_value"


# --------------------------------------------------------------------------- distributions


# Written out rather than built with distrax: importing distrax loads TensorFlow
# Probability's JAX substrate (seconds of start-up) for a few lines of arithmetic.

LOG_2PI = math.log(2.0 * math.pi)


def policy_mode(policy_output: Any) -> jax.Array:
    """The most likely action: argmax of the logits (int32), or the Gaussian's mean."""
    if isinstance(policy_output, GaussianParams):
        return policy_output.loc
    return jnp.argmax(policy_output, axis=-1).astype(jnp.int32)


def log_prob(policy_output: Any, action: jax.Array) -> jax.Array:
    """log pi(action | observation) of stored actions.

    Categorical: log_softmax(logits)[a]. Diagonal Gaussian over the last axis:
    -sum_i [ ((a_i - mu_i) / sigma_i)^2 / 2 + log sigma_i + log(2 pi) / 2 ].
    """
    if isinstance(policy_output, GaussianParams):
        z = (action - policy_output.loc) / policy_output.scale
        return -jnp.sum(0.5 * jnp.square(z) + jnp.log(policy_output.scale) + 0.5 * LOG_2PI, axis=-1)
    log_probs = jax.nn.log_softmax(policy_output, axis=-1)
    return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def entropy(policy_output: Any) -> jax.Array:
    """The policy's entropy at each observation.

    Categorical: -sum_a p_a log p_a. Diagonal Gaussian: sum_i [ log sigma_i + (1 + log(2 pi)) / 2 ].
    """
    if isinstance(policy_output, GaussianParams):
        return jnp.sum(jnp.log(policy_output.scale) + 0.5 * (1.0 + LOG_2PI), axis=-1)
    log_probs = jax.nn.log_softmax(policy_output, axis=-1)
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def sample(policy_output: Any, key: jax.Array) -> jax.Array:
    """An action drawn from the policy: int32 for discrete actions, mu + sigma * N(0, 1) otherwise."""
    if isinstance(policy_output, GaussianParams):
        noise = jax.random.normal(key, policy_output.loc.shape, policy_output.loc.dtype)
        return policy_output.loc + policy_output.scale * noise
    return jax.random.categorical(key, policy_output, axis=-1).astype(jnp.int32)


def sample_with_log_prob(policy_output: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A sampled action and its log-probability."""
    action = sample(policy_output, key)
    return action, log_prob(policy_output, action)
