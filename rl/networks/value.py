"""Q-networks for discrete actions (DQN and its relatives)."""

from __future__ import annotations

from typing import Sequence

import haiku as hk
import jax
import jax.numpy as jnp

from rl.networks.base import FeedForwardNetwork, zeros_like_spec
from rl.specs import EnvironmentSpec, num_actions


def _flatten(observation: jax.Array) -> jax.Array:
    return jnp.reshape(observation, (observation.shape[0], -1)).astype(jnp.float32)


def make_q_network(
    environment_spec: EnvironmentSpec,
    hidden_sizes: Sequence[int] = (256, 256),
    dueling: bool = False,
    layer_norm: bool = False,
    outputs_per_action: int = 1,
) -> FeedForwardNetwork:
    """An MLP mapping a batch of observations to one value per action, or with
    `outputs_per_action` k > 1 (what a distributional agent asks for) k values per action:
    (B, actions, k).

    The dueling variant splits the last layer into a state value and mean-centred
    advantages, which helps when many actions have similar values.
    """
    actions = num_actions(environment_spec.actions)
    k = outputs_per_action

    def head(features: jax.Array, size: int) -> jax.Array:
        out = hk.Linear(size * k)(features)
        return out if k == 1 else jnp.reshape(out, out.shape[:-1] + (size, k))

    def forward(observation: jax.Array) -> jax.Array:
        layers = []
        for size in hidden_sizes:
            layers.append(hk.Linear(size))
            if layer_norm:
                layers.append(hk.LayerNorm(axis=-1, create_scale=True, create_offset=True))
            layers.append(jax.nn.relu)
        features = hk.Sequential(layers)(_flatten(observation))
        if not dueling:
            return head(features, actions)
        value, advantages = head(features, 1), head(features, actions)
        axis = -1 if k == 1 else -2  # The actions' axis.
        return value + advantages - jnp.mean(advantages, axis=axis, keepdims=True)

    transformed = hk.without_apply_rng(hk.transform(forward))
    dummy = zeros_like_spec(environment_spec.observations)
    # Jitted, as every network's init: one compiled program (cached across runs), not dozens
    # of eagerly dispatched operations each compiled on its own.
    return FeedForwardNetwork(init=jax.jit(lambda key: transformed.init(key, dummy)), apply=transformed.apply)


make_q_network.network_kind = "q_values"
