"""Convolutional networks for pixel observations: a torso on uint8 [H, W, C] frames (scaled
by 1/255 here, so replay keeps uint8) under a Q head or policy and value heads; network=lstm
takes a torso by its dotted path; torsos and factories declare that they read pixels."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
from dm_env import specs

from rl.networks.base import NetworkFactory, NetworkKind, policy_head, q_head, transform, value_head
from rl.core import EnvironmentSpec, num_actions

Torso = Callable[[jax.Array], jax.Array]


def q_values_head(features: jax.Array, environment_spec: EnvironmentSpec, dueling: bool) -> Any:
    return q_head(features, num_actions(environment_spec.actions), dueling)


def policy_value_heads(features: jax.Array, environment_spec: EnvironmentSpec, dueling: bool) -> Any:
    return policy_head(features, environment_spec.actions), value_head(features)


# The heads a torso here goes under, by the kind the agent asks for (the experiment says which).
HEADS = {NetworkKind.Q_VALUES: q_values_head, NetworkKind.POLICY_VALUE: policy_value_heads}
NETWORK_KINDS = tuple(HEADS)


def scale_frames(frames: jax.Array) -> jax.Array:
    if jnp.issubdtype(frames.dtype, jnp.integer):
        return frames.astype(jnp.float32) / 255.0
    return frames.astype(jnp.float32)


def _nature_torso(hidden_size: int = 512) -> Torso:
    """The Nature DQN torso (Mnih et al., 2015): three ReLU convolutions, then a ReLU layer."""

    def torso(frames: jax.Array) -> jax.Array:
        x = scale_frames(frames)
        for channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = jax.nn.relu(hk.Conv2D(channels, kernel, stride=stride, padding="VALID")(x))
        x = jnp.reshape(x, (x.shape[0], -1))
        return jax.nn.relu(hk.Linear(int(hidden_size))(x))

    return torso


nature_torso = NetworkFactory(_nature_torso, (), "pixels")


def _impala_torso(channels: Sequence[int] = (16, 32, 32), num_blocks: int = 2, hidden_size: int = 256) -> Torso:
    """IMPALA's residual torso (Espeholt et al., 2018): per stage a convolution, a max pool and
    `num_blocks` residual blocks, then a ReLU layer of `hidden_size`."""

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


impala_torso = NetworkFactory(_impala_torso, (), "pixels")


def _build(environment_spec: EnvironmentSpec, torso: Torso, network_kind: NetworkKind, dueling: bool) -> Any:
    observations = environment_spec.observations
    shape = tuple(observations.shape) if isinstance(observations, specs.Array) else ()
    if len(shape) != 3:
        raise ValueError(
            f"convolutional networks read [height, width, channels] frames, got observations of shape {shape}"
        )
    if network_kind not in HEADS:
        raise ValueError(f"network_kind must be one of {[str(kind) for kind in HEADS]}, got {network_kind!r}")
    head = HEADS[NetworkKind(network_kind)]

    def forward(observation: jax.Array) -> Any:
        return head(torso(observation), environment_spec, dueling)

    return transform(forward, observations)


def _make_atari_cnn(
    environment_spec: EnvironmentSpec,
    hidden_size: int = 512,
    dueling: bool = False,
    network_kind: NetworkKind = NetworkKind.Q_VALUES,
) -> Any:
    """The Nature DQN torso under a Q head (`q_values`) or policy and value heads (`policy_value`)."""
    if int(hidden_size) <= 0:
        raise ValueError(f"hidden_size must be positive, got {hidden_size}")
    return _build(environment_spec, nature_torso(hidden_size), network_kind, dueling)


def _make_impala_resnet(
    environment_spec: EnvironmentSpec,
    channels: Sequence[int] = (16, 32, 32),
    num_blocks: int = 2,
    hidden_size: int = 256,
    dueling: bool = False,
    network_kind: NetworkKind = NetworkKind.Q_VALUES,
) -> Any:
    """IMPALA's residual torso under a Q head (`q_values`) or policy and value heads (`policy_value`)."""
    if not channels or any(int(c) <= 0 for c in channels) or int(num_blocks) < 0 or int(hidden_size) <= 0:
        raise ValueError(
            f"channels and hidden_size must be positive and num_blocks >= 0, got {list(channels)}, {num_blocks}, {hidden_size}"
        )
    return _build(environment_spec, impala_torso(channels, num_blocks, hidden_size), network_kind, dueling)


make_atari_cnn = NetworkFactory(_make_atari_cnn, NETWORK_KINDS, "pixels")
make_impala_resnet = NetworkFactory(_make_impala_resnet, NETWORK_KINDS, "pixels")
