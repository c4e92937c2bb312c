"""Recurrent Q-networks (R2D2): torso -> LSTM core -> Q head, conf/network/lstm.yaml.
Actors `apply` one step, carrying the core state `{"cell": (B, H), "hidden": (B, H)}`;
learners `unroll` the same modules over stored (time-major) sequences, so they agree."""

from __future__ import annotations

import dataclasses
import functools
import pkgutil
from typing import Any, Callable, Mapping, Sequence

import haiku as hk
import jax
import numpy as np
from dm_env import specs

from rl.networks.base import NetworkFactory, NetworkKind, check_sizes, flatten, mlp, q_head, zeros_like_spec
from rl.core import EnvironmentSpec, num_actions

CoreState = Mapping[str, Any]  # {"cell": (B, H), "hidden": (B, H)}


@dataclasses.dataclass(frozen=True)
class RecurrentNetwork:
    """`apply` one step ((B, A) Q-values, next state) or `unroll` (time-major: (T, B, A), final
    state) from a state; `initial_state(batch)` is zeros, `state_spec` one row of it."""

    init: Callable[[jax.Array], Any]
    initial_state: Callable[[int], dict[str, np.ndarray]]
    apply: Callable[[Any, Any, CoreState], tuple[jax.Array, dict[str, jax.Array]]]
    unroll: Callable[[Any, Any, CoreState], tuple[jax.Array, dict[str, jax.Array]]]
    state_spec: dict[str, specs.Array]


def lstm_state_spec(size: int) -> dict[str, specs.Array]:
    return {"cell": specs.Array((size,), np.float32, "cell"), "hidden": specs.Array((size,), np.float32, "hidden")}


def _mlp_torso(hidden_sizes: Sequence[int] = (128,), layer_norm: bool = False) -> Callable[[jax.Array], jax.Array]:
    """ReLU layers over the flattened observation (a vector task's torso)."""
    return lambda observation: mlp(flatten(observation), hidden_sizes, layer_norm)


mlp_torso = NetworkFactory(_mlp_torso, (), "vector")


# "identity": no torso, the core reads the flattened observation.
TORSOS: dict[str, Callable[..., Callable[[jax.Array], jax.Array]]] = {"mlp": mlp_torso, "identity": lambda: flatten}


def resolve_torso(torso: str) -> Callable[..., Callable[[jax.Array], jax.Array]]:
    """A torso factory by short name or dotted path: given `torso_kwargs`, it returns a haiku
    function from (B, ...) observations to (B, F) features."""
    if torso in TORSOS:
        return TORSOS[torso]
    if "." not in torso:
        raise ValueError(f"torso must be one of {sorted(TORSOS)} or a dotted path to a torso factory, got {torso!r}")
    try:
        factory = pkgutil.resolve_name(torso)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"torso {torso!r} cannot be imported ({error})") from None
    if not callable(factory):
        raise ValueError(f"torso {torso!r} is not callable")
    return factory


def _make_recurrent_q_network(
    environment_spec: EnvironmentSpec,
    torso: str = "mlp",
    torso_kwargs: Mapping[str, Any] | None = None,
    lstm_size: int = 128,
    dueling: bool = False,
) -> RecurrentNetwork:
    """A torso (MLP by default), an LSTM of `lstm_size` units and a (dueling) Q head."""
    if int(lstm_size) <= 0:
        raise ValueError(f"lstm_size must be positive, got {lstm_size}")
    kwargs = dict(torso_kwargs or {})
    if torso == "mlp":
        check_sizes(**{"torso_kwargs.hidden_sizes": kwargs.get("hidden_sizes", (128,))})
    torso_factory = resolve_torso(torso)
    actions = num_actions(environment_spec.actions)
    size = int(lstm_size)

    def functions() -> tuple[Callable[..., Any], tuple[Callable[..., Any], Callable[..., Any]]]:
        embed = hk.to_module(torso_factory(**kwargs))(name="torso")
        core = hk.LSTM(size, name="lstm")
        head = hk.to_module(lambda outputs: q_head(outputs, actions, dueling))(name="head")

        def step(observation: jax.Array, state: CoreState) -> tuple[jax.Array, dict[str, jax.Array]]:
            outputs, new_state = core(embed(observation), hk.LSTMState(hidden=state["hidden"], cell=state["cell"]))
            return head(outputs), {"cell": new_state.cell, "hidden": new_state.hidden}

        def unroll(observations: jax.Array, state: CoreState) -> tuple[jax.Array, dict[str, jax.Array]]:
            features = hk.BatchApply(embed)(observations)
            initial = hk.LSTMState(hidden=state["hidden"], cell=state["cell"])
            outputs, final = hk.dynamic_unroll(core, features, initial, time_major=True)
            return hk.BatchApply(head)(outputs), {"cell": final.cell, "hidden": final.hidden}

        return step, (step, unroll)

    transformed = hk.without_apply_rng(hk.multi_transform(functions))
    state_spec = lstm_state_spec(size)
    initial_state = functools.partial(zeros_like_spec, state_spec)
    dummy = zeros_like_spec(environment_spec.observations)
    init = jax.jit(lambda key: transformed.init(key, dummy, initial_state(1)))
    return RecurrentNetwork(init, initial_state, *transformed.apply, state_spec)


# What it reads is its torso's.
make_recurrent_q_network = NetworkFactory(_make_recurrent_q_network, (NetworkKind.RECURRENT_Q,), None)
