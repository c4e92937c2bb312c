"""Feed-forward networks and their parts (init/apply pairs, MLPs, heads): the MLP Q-network,
policy-and-value MLPs (PPO, IMPALA) with their distribution helpers, actor-critic MLPs (SAC,
TD3, D4PG). Each factory is a `NetworkFactory` declaring what experiments check before building."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import tree

from rl.lazy_tensorflow import import_without_tensorflow
from rl.core import EnvironmentSpec, is_discrete, num_actions

if TYPE_CHECKING:
    import distrax


class NetworkKind(enum.StrEnum):
    """The heads an agent's network ends in: what an agent asks for and a network factory declares it builds
    (a `str`, so configs and messages read its value)."""

    Q_VALUES = "q_values"  # A value per action (DQN and its kin).
    POLICY_VALUE = "policy_value"  # A policy and a state value on one torso (PPO, IMPALA).
    ACTOR_CRITIC = "actor_critic"  # A policy network and a critic network (SAC, TD3, D4PG).
    RECURRENT_Q = "recurrent_q"  # A value per action through an LSTM core (R2D2).


@dataclasses.dataclass(frozen=True)
class FeedForwardNetwork:
    """A pure-function pair (init, apply) that hides haiku from agents and launchers."""

    init: Callable[[jax.Array], Any]
    apply: Callable[..., Any]
    observation_spec: Any = None  # What a learner may keep observation statistics of (PPO).


@dataclasses.dataclass(eq=False)
class NetworkFactory:
    """A network (or torso) factory and what it declares: the heads it builds (several: the experiment says
    which by `network_kind`; none: a torso) and the observations it reads ("vector", "pixels" for uint8
    [height, width, channels] frames, None: its torso's). Called as `build`, whose signature, type hints
    and docstring it shows (config checks read them)."""

    build: Callable[..., Any]
    network_kinds: tuple[NetworkKind, ...]
    observation_kind: str | None

    def __post_init__(self) -> None:
        functools.update_wrapper(self, self.build)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)


class GaussianParams(NamedTuple):
    """A stochastic policy network's output: a diagonal Gaussian (before any tanh squash)."""

    loc: jax.Array
    scale: jax.Array


def tanh_normal(loc: jax.Array, scale: jax.Array) -> distrax.Distribution:
    """A diagonal Gaussian squashed into [-1, 1] by tanh, one event over the last axis
    (distrax keeps its samples' log-probabilities finite; imported on use: a slow import)."""
    distrax = import_without_tensorflow("distrax")
    base = distrax.MultivariateNormalDiag(loc=loc, scale_diag=scale)
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))


def zeros_like_spec(spec: Any, batch_size: int | None = 1) -> Any:
    """A dummy input for `init`: zeros shaped like `spec`, with a leading batch axis."""
    prefix = () if batch_size is None else (batch_size,)
    return tree.map_structure(lambda s: np.zeros(prefix + tuple(s.shape), s.dtype), spec)


def transform(forward: Callable[..., Any], observation_spec: Any, *more_inputs: Any) -> FeedForwardNetwork:
    """`forward(observations, *more)` as an (init, apply) pair; init is jitted (one cached program)."""
    transformed = hk.without_apply_rng(hk.transform(forward))
    dummy_inputs = (zeros_like_spec(observation_spec), *more_inputs)
    init = jax.jit(lambda key: transformed.init(key, *dummy_inputs))
    return FeedForwardNetwork(init, transformed.apply, observation_spec)


def check_sizes(**sizes: Sequence[int]) -> None:
    """Raises a ValueError naming the first list of layer sizes holding one that is not positive."""
    for name, values in sizes.items():
        if any(int(size) <= 0 for size in values):
            raise ValueError(f"{name} must be positive, got {list(values)}")


def flatten(observation: jax.Array) -> jax.Array:
    return jnp.reshape(observation, (observation.shape[0], -1)).astype(jnp.float32)


def mlp(
    features: jax.Array,
    hidden_sizes: Sequence[int],
    layer_norm: bool = False,
    activation: Callable[[jax.Array], jax.Array] = jax.nn.relu,
    w_init: Any = None,
) -> jax.Array:
    """Linear layers, each followed by an optional layer norm and the activation."""
    for size in hidden_sizes:
        features = hk.Linear(int(size), w_init=w_init)(features)
        if layer_norm:
            features = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(features)
        features = activation(features)
    return features


def q_head(features: jax.Array, actions: int, dueling: bool) -> jax.Array:
    """One Q-value per action; dueling: a state value plus mean-centred advantages."""
    if not dueling:
        return hk.Linear(actions, name="q_head")(features)
    value = hk.Linear(1, name="value_head")(features)
    advantages = hk.Linear(actions, name="advantage_head")(features)
    return value + advantages - jnp.mean(advantages, axis=-1, keepdims=True)


def policy_head(features: jax.Array, actions: Any, initial_log_std: float = 0.0) -> Any:
    """Logits, or a Gaussian with a state-independent learned log std; small initial weights
    (orthogonal, gain 0.01) start the policy near uniform / N(0, std^2)."""
    discrete = is_discrete(actions)
    num_outputs = int(actions.num_values) if discrete else int(np.prod(actions.shape))
    head = hk.Linear(num_outputs, w_init=hk.initializers.Orthogonal(0.01), name="policy_head")(features)
    if discrete:
        return head
    log_std = hk.get_parameter("log_std", (num_outputs,), init=hk.initializers.Constant(initial_log_std))
    return GaussianParams(loc=head, scale=jnp.broadcast_to(jnp.exp(log_std), head.shape))


def value_head(features: jax.Array) -> jax.Array:
    return hk.Linear(1, w_init=hk.initializers.Orthogonal(1.0), name="value_head")(features)[:, 0]


def _make_q_network(
    environment_spec: EnvironmentSpec,
    hidden_sizes: Sequence[int] = (256, 256),
    dueling: bool = False,
    layer_norm: bool = False,
    outputs_per_action: int = 1,
) -> FeedForwardNetwork:
    """An MLP from observations to one value per action (B, actions), or with
    `outputs_per_action` k > 1 (a distributional agent's) k per action: (B, actions, k)."""
    actions = num_actions(environment_spec.actions)
    k = outputs_per_action

    def head(features: jax.Array, size: int) -> jax.Array:
        out = hk.Linear(size * k)(features)
        return out if k == 1 else jnp.reshape(out, out.shape[:-1] + (size, k))

    def forward(observation: jax.Array) -> jax.Array:
        features = mlp(flatten(observation), hidden_sizes, layer_norm)
        if not dueling:
            return head(features, actions)
        value = head(features, 1)
        advantages = head(features, actions)
        axis = -1 if k == 1 else -2  # The actions' axis.
        return value + advantages - jnp.mean(advantages, axis=axis, keepdims=True)

    return transform(forward, environment_spec.observations)


make_q_network = NetworkFactory(_make_q_network, (NetworkKind.Q_VALUES,), "vector")
ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "swish": jax.nn.swish}  # swish: Brax's PPO networks.


def _make_policy_value_network(
    environment_spec: EnvironmentSpec,
    policy_hidden_sizes: Sequence[int] = (64, 64),
    value_hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    initial_log_std: float = 0.0,
) -> FeedForwardNetwork:
    """Separate policy and value MLPs, hidden layers orthogonally initialised (gain sqrt(2)):
    `apply(params, observations) -> (logits or GaussianParams, (B,) value)`."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    check_sizes(policy_hidden_sizes=policy_hidden_sizes, value_hidden_sizes=value_hidden_sizes)
    actions = environment_spec.actions
    if not is_discrete(actions) and not np.issubdtype(np.dtype(actions.dtype), np.floating):
        raise ValueError(f"policy-value networks need discrete or float actions, got {actions}")
    layers = dict(activation=ACTIVATIONS[activation], w_init=hk.initializers.Orthogonal(np.sqrt(2.0)))

    def forward(observation: jax.Array) -> tuple[Any, jax.Array]:
        inputs = flatten(observation)
        policy_output = policy_head(mlp(inputs, policy_hidden_sizes, **layers), actions, initial_log_std)
        return policy_output, value_head(mlp(inputs, value_hidden_sizes, **layers))

    return transform(forward, environment_spec.observations)


make_policy_value_network = NetworkFactory(_make_policy_value_network, (NetworkKind.POLICY_VALUE,), "vector")

# Distributions written out: importing distrax would slow every start-up.
LOG_2PI = math.log(2.0 * math.pi)


def policy_mode(policy_output: Any) -> jax.Array:
    """The most likely action: argmax of the logits (int32), or the Gaussian's mean."""
    if isinstance(policy_output, GaussianParams):
        return policy_output.loc
    return jnp.argmax(policy_output, axis=-1).astype(jnp.int32)


def log_prob(policy_output: Any, action: jax.Array) -> jax.Array:
    """log pi(action | observation) of the logits or the diagonal Gaussian."""
    if isinstance(policy_output, GaussianParams):
        z = (action - policy_output.loc) / policy_output.scale
        return -jnp.sum(0.5 * jnp.square(z) + jnp.log(policy_output.scale) + 0.5 * LOG_2PI, axis=-1)
    log_probs = jax.nn.log_softmax(policy_output, axis=-1)
    # A select and a sum rather than a gather, which accelerators run far slower; the same value exactly.
    taken = jnp.arange(log_probs.shape[-1]) == action[..., None].astype(jnp.int32)
    return jnp.sum(jnp.where(taken, log_probs, 0.0), axis=-1)


def entropy(policy_output: Any) -> jax.Array:
    """The entropy of the logits' or the diagonal Gaussian's distribution."""
    if isinstance(policy_output, GaussianParams):
        return jnp.sum(jnp.log(policy_output.scale) + 0.5 * (1.0 + LOG_2PI), axis=-1)
    log_probs = jax.nn.log_softmax(policy_output, axis=-1)
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def sample_with_log_prob(policy_output: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """An action drawn from the policy and its log-probability."""
    if isinstance(policy_output, GaussianParams):
        noise = jax.random.normal(key, policy_output.loc.shape, policy_output.loc.dtype)
        action = policy_output.loc + policy_output.scale * noise
    else:
        action = jax.random.categorical(key, policy_output, axis=-1).astype(jnp.int32)
    return action, log_prob(policy_output, action)


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
    critic_layer_norm: bool = False

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

        return transform(forward, self.environment_spec.observations)

    def critic_network(self, num_critics: int = 1, num_outputs: int = 1) -> FeedForwardNetwork:
        """`apply(params, observations, actions)` -> (num_critics, B, num_outputs): independent MLPs."""

        def forward(observation: jax.Array, action: jax.Array) -> jax.Array:
            inputs = jnp.concatenate([flatten(observation), flatten(action)], axis=-1)
            outputs = []
            for index in range(num_critics):
                features = mlp(inputs, self.critic_hidden_sizes, self.layer_norm or self.critic_layer_norm)
                outputs.append(hk.Linear(num_outputs, name=f"critic_{index}_head")(features))
            return jnp.stack(outputs, axis=0)

        return transform(forward, self.environment_spec.observations, np.zeros((1, self.action_size), np.float32))


def _make_actor_critic_networks(
    environment_spec: EnvironmentSpec,
    policy_hidden_sizes: Sequence[int] = (256, 256),
    critic_hidden_sizes: Sequence[int] = (256, 256),
    layer_norm: bool = False,
    critic_layer_norm: bool = False,
) -> ActorCriticNetworks:
    """Policy and critic MLPs for a continuous (bounded) action spec; `layer_norm` in both, `critic_layer_norm`
    in the critics only (Brax's SAC)."""
    if is_discrete(environment_spec.actions):
        raise ValueError(f"actor-critic networks need continuous actions, got {environment_spec.actions}")
    check_sizes(policy_hidden_sizes=policy_hidden_sizes, critic_hidden_sizes=critic_hidden_sizes)
    return ActorCriticNetworks(
        environment_spec=environment_spec,
        policy_hidden_sizes=tuple(int(s) for s in policy_hidden_sizes),
        critic_hidden_sizes=tuple(int(s) for s in critic_hidden_sizes),
        layer_norm=bool(layer_norm),
        critic_layer_norm=bool(critic_layer_norm),
    )


make_actor_critic_networks = NetworkFactory(_make_actor_critic_networks, (NetworkKind.ACTOR_CRITIC,), "vector")
