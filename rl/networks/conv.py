"""Convolutional networks for pixel observations (environment=atari).

Two torsos map a batch of [H, W, C] frames to a feature vector:

* `nature_torso`: the Nature DQN torso (Mnih et al., 2015): 32 8x8 filters at stride 4,
  64 4x4 at stride 2, 64 3x3 at stride 1 (VALID padding, ReLU), then a 512-unit ReLU layer;
* `impala_torso`: IMPALA's deep residual torso (Espeholt et al., 2018): per stage a 3x3
  convolution, a 3x3 max pool at stride 2 and two residual blocks (ReLU, conv, ReLU, conv,
  add), stages of 16, 32 and 32 channels, then a 256-unit ReLU layer.

Both read uint8 frames and scale them by 1/255 themselves, so observations stay uint8
in replay. `network=atari_cnn` and `network=impala_resnet` put one torso under the head
the agent needs: Q-values (dqn) or a policy and a value sharing the torso (ppo, impala).
For recurrent agents, network=lstm takes either torso by its dotted path
(`network=lstm_atari_cnn`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from rl.networks.base import FeedForwardNetwork, zeros_like_spec
from rl.networks.distributions import GaussianParams
from rl.networks.policy_value import PolicyValueNetwork
from rl.specs import EnvironmentSpec, is_discrete, num_actions

Torso = Callable[[jax.Array], jax.Array]
# The network kinds (what agents need, see rl/agents/builder.py) these factories build; the
# experiment tells a factory which one its agent needs (`network_kind`).
NETWORK_KINDS = ("q_values", "policy_value")


def scale_frames(frames: jax.Array) -> jax.Array:
    """uint8 pixels in [0, 255] as float32 in [0, 1]; float inputs pass unchanged."""
    if jnp.issubdtype(frames.dtype, jnp.integer):
        return frames.astype(jnp.float32) / 255.0
    return frames.astype(jnp.float32)


def nature_torso(hidden_size: int = 512) -> Torso:
    """The Nature DQN torso: (B, H, W, C) frames -> (B, hidden_size) features."""

    def torso(frames: jax.Array) -> jax.Array:
        x = scale_frames(frames)
        for channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = jax.nn.relu(hk.Conv2D(channels, kernel, stride=stride, padding="VALID")(x))
        x = jnp.reshape(x, (x.shape[0], -1))
        return jax.nn.relu(hk.Linear(int(hidden_size))(x))

    return torso


def impala_torso(channels: Sequence[int] = (16, 32, 32), num_blocks: int = 2, hidden_size: int = 256) -> Torso:
    """IMPALA's residual torso: (B, H, W, C) frames -> (B, hidden_size) features."""

    def torso(frames: jax.Array) -> jax.Array:
        x = scale_frames(frames)
        for stage, width in enumerate(channels):
            x = hk.Conv2D(int(width), 3, padding="SAME", name=f"stage_{stage}_conv")(x)
            x = hk.max_pool(x, window_shape=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME")
            for block in range(int(num_blocks)):
                y = hk.Conv2D(int(width), 3, padding="SAME", name=f"stage_{stage}_block_{block}_0")(jax.nn.relu(x))
                y = hk.Conv2D(int(width), 3, padding="SAME", name=f"stage_{stage}_block_{block}_1")(jax.nn.relu(y))
                x = x + y
        x = jnp.reshape(jax.nn.relu(x), (x.shape[0], -1))
        return jax.nn.relu(hk.Linear(int(hidden_size))(x))

    return torso


# What the torsos read: validation refuses them on vector observations (and MLPs on pixels).
nature_torso.observation_kind = "pixels"
impala_torso.observation_kind = "pixels"


def _q_network(environment_spec: EnvironmentSpec, make_torso: Callable[[], Torso], dueling: bool) -> FeedForwardNetwork:
    actions = num_actions(environment_spec.actions)

    def forward(observation: jax.Array) -> jax.Array:
        features = make_torso()(observation)
        if not dueling:
            return hk.Linear(actions, name="q_head")(features)
        value = hk.Linear(1, name="value_head")(features)
        advantages = hk.Linear(actions, name="advantage_head")(features)
        return value + advantages - jnp.mean(advantages, axis=-1, keepdims=True)

    transformed = hk.without_apply_rng(hk.transform(forward))
    dummy = zeros_like_spec(environment_spec.observations)
    return FeedForwardNetwork(init=jax.jit(lambda key: transformed.init(key, dummy)), apply=transformed.apply)


def _policy_value_network(environment_spec: EnvironmentSpec, make_torso: Callable[[], Torso]) -> PolicyValueNetwork:
    """A policy head (orthogonal, gain 0.01: a near-uniform start) and a value head on one
    shared torso, as in the PPO and IMPALA Atari networks."""
    actions = environment_spec.actions
    discrete = is_discrete(actions)
    num_outputs = int(actions.num_values) if discrete else int(np.prod(actions.shape))

    def forward(observation: jax.Array) -> tuple[Any, jax.Array]:
        features = make_torso()(observation)
        head = hk.Linear(num_outputs, w_init=hk.initializers.Orthogonal(0.01), name="policy_head")(features)
        if discrete:
            policy_output: Any = head
        else:
            log_std = hk.get_parameter("log_std", (num_outputs,), init=jnp.zeros)
            policy_output = GaussianParams(loc=head, scale=jnp.broadcast_to(jnp.exp(log_std), head.shape))
        value = hk.Linear(1, w_init=hk.initializers.Orthogonal(1.0), name="value_head")(features)
        return policy_output, value[:, 0]

    transformed = hk.without_apply_rng(hk.transform(forward))
    dummy = zeros_like_spec(environment_spec.observations)
    init = jax.jit(lambda key: transformed.init(key, dummy))
    return PolicyValueNetwork(init=init, apply=transformed.apply, observation_spec=environment_spec.observations)


def _check_pixels(environment_spec: EnvironmentSpec) -> None:
    shape = tuple(getattr(environment_spec.observations, "shape", ()))
    if len(shape) != 3:
        raise ValueError(
            f"convolutional networks read [height, width, channels] frames, got observations of shape {shape}"
        )


def _build(environment_spec: EnvironmentSpec, make_torso: Callable[[], Torso], network_kind: str, dueling: bool) -> Any:
    _check_pixels(environment_spec)
    if network_kind == "q_values":
        return _q_network(environment_spec, make_torso, dueling)
    if network_kind == "policy_value":
        return _policy_value_network(environment_spec, make_torso)
    raise ValueError(f"network_kind must be one of {list(NETWORK_KINDS)}, got {network_kind!r}")


def make_atari_cnn(
    environment_spec: EnvironmentSpec, hidden_size: int = 512, dueling: bool = False, network_kind: str = "q_values"
) -> Any:
    """The Nature DQN torso under a Q head (`q_values`) or policy and value heads (`policy_value`)."""
    if int(hidden_size) <= 0:
        raise ValueError(f"hidden_size must be positive, got {hidden_size}")
    return _build(environment_spec, lambda: nature_torso(hidden_size), network_kind, dueling)


def make_impala_resnet(
    environment_spec: EnvironmentSpec,
    channels: Sequence[int] = (16, 32, 32),
    num_blocks: int = 2,
    hidden_size: int = 256,
    dueling: bool = False,
    network_kind: str = "q_values",
) -> Any:
    """IMPALA's residual torso under a Q head (`q_values`) or policy and value heads (`policy_value`)."""
    if not channels or any(int(c) <= 0 for c in channels) or int(num_blocks) < 0 or int(hidden_size) <= 0:
        raise ValueError(
            f"channels and hidden_size must be positive and num_blocks >= 0, got {list(channels)}, {num_blocks}, {hidden_size}"
        )
    return _build(environment_spec, lambda: impala_torso(channels, num_blocks, hidden_size), network_kind, dueling)


for _factory in (make_atari_cnn, make_impala_resnet):
    _factory.network_kinds = NETWORK_KINDS
    _factory.observation_kind = "pixels"
