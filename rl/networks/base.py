"""What every network is built from (init/apply pairs, MLP layers, Q and policy heads,
Gaussian policy outputs), and the MLP Q-network."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import tree

from rl.lazy_tensorflow import import_without_tensorflow
from rl.specs import EnvironmentSpec, is_discrete, num_actions

if TYPE_CHECKING:
    import distrax


@dataclasses.dataclass(frozen=True)
class FeedForwardNetwork:
    """A pure-function pair (init, apply) that hides haiku from agents and launchers."""

    init: Callable[[jax.Array], Any]
    apply: Callable[..., Any]


class GaussianParams(NamedTuple):
    """A stochastic policy network's output: a diagonal Gaussian (before any tanh squash)."""

    loc: jax.Array
    scale: jax.Array


def tanh_normal(loc: jax.Array, scale: jax.Array) -> distrax.Distribution:
    """A diagonal Gaussian squashed into [-1, 1] by tanh, one event over the last axis
    (distrax's log-probabilities of its own samples stay finite where tanh saturates).
    distrax loads TensorFlow Probability's JAX substrate (about 3 s): imported on use."""
    distrax = import_without_tensorflow("distrax")
    base = distrax.MultivariateNormalDiag(loc=loc, scale_diag=scale)
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))


def zeros_like_spec(spec: Any, batch_size: int | None = 1) -> Any:
    """A dummy input for `init`: zeros shaped like `spec`, with a leading batch axis."""
    prefix = () if batch_size is None else (batch_size,)
    return tree.map_structure(lambda s: np.zeros(prefix + tuple(s.shape), s.dtype), spec)


def transform(forward: Callable[..., Any], *dummy_inputs: Any) -> FeedForwardNetwork:
    """`forward` as an (init, apply) pair; init is jitted (one cached program, not dozens of ops)."""
    transformed = hk.without_apply_rng(hk.transform(forward))
    return FeedForwardNetwork(init=jax.jit(lambda key: transformed.init(key, *dummy_inputs)), apply=transformed.apply)


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
    """Logits (discrete), or a Gaussian with a state-independent learned log std; small
    initial weights (orthogonal, gain 0.01) start the policy near uniform / N(0, std^2)."""
    discrete = is_discrete(actions)
    num_outputs = int(actions.num_values) if discrete else int(np.prod(actions.shape))
    head = hk.Linear(num_outputs, w_init=hk.initializers.Orthogonal(0.01), name="policy_head")(features)
    if discrete:
        return head
    log_std = hk.get_parameter("log_std", (num_outputs,), init=hk.initializers.Constant(initial_log_std))
    return GaussianParams(loc=head, scale=jnp.broadcast_to(jnp.exp(log_std), head.shape))


def value_head(features: jax.Array) -> jax.Array:
    return hk.Linear(1, w_init=hk.initializers.Orthogonal(1.0), name="value_head")(features)[:, 0]


def make_q_network(
    environment_spec: EnvironmentSpec,
    hidden_sizes: Sequence[int] = (256, 256),
    dueling: bool = False,
    layer_norm: bool = False,
    outputs_per_action: int = 1,
) -> FeedForwardNetwork:
    """An MLP from a batch of observations to one value per action (B, actions), or with
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
        value, advantages = head(features, 1), head(features, actions)
        axis = -1 if k == 1 else -2  # The actions' axis.
        return value + advantages - jnp.mean(advantages, axis=axis, keepdims=True)

    return transform(forward, zeros_like_spec(environment_spec.observations))


make_q_network.network_kind = "q_values"
