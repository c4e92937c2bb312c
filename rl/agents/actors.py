"""The actors: `FeedForwardActor` and `RecurrentActor` (R2D2: a core state carried across steps)."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable, Sequence

import dm_env
import jax
import numpy as np
import tree

from rl import core
from rl.core import VariableClient
from rl.policies import Head
from rl.systems.base import Policy

if TYPE_CHECKING:  # Replay (reverb, TensorFlow) loads when an adder is built.
    from rl.replay.adders import Adder

# actor_step -> the exploration a head acts with there ({"epsilon": ...}), for records.
Exploration = Callable[[int], dict[str, float]]


@dataclasses.dataclass(frozen=True)
class ExploringPolicy:
    """A `Policy` (`act`) and the exploration it acts with, which its actor records."""

    act: Policy
    exploration: Exploration | None = None

    def __call__(self, params: Any, key: jax.Array, observations: Any, step: jax.Array) -> Any:
        return self.act(params, key, observations, step)


def with_exploration(policy: Policy, head: Head) -> ExploringPolicy:
    """`policy` acting with `head`, the head's exploration declared for records."""
    return ExploringPolicy(policy, head.exploration_metrics)


class FeedForwardActor(core.Actor):
    """Acts with a jitted policy (one call for every copy of a vector environment) on the latest
    parameters and feeds an adder, if any, with the step and the `extras` of a policy returning
    `(actions, extras)` (PPO, IMPALA: a row per copy). With `defer_adder` a step's adder calls are
    made in the next `select_action`, while XLA computes the actions; `flush()` makes them now."""

    def __init__(
        self,
        policy: Policy,
        random_key: jax.Array,
        variable_client: VariableClient,
        adder: Adder | None = None,
        action_dtype: Any = None,
        defer_adder: bool = True,
    ):
        def act(params: Any, key: jax.Array, *inputs: Any):
            key, policy_key = jax.random.split(key)
            return policy(params, policy_key, *inputs), key

        self._act = jax.jit(act)
        self._key = random_key
        self._client = variable_client
        self._adder = adder
        self._action_dtype = action_dtype
        self.step_count = 0  # Environment steps observed so far: where this actor's schedules are.
        self._defer = bool(defer_adder)
        self._pending: list[Callable[[], Any]] = []  # Queued adder calls, in order.
        self._exploration = policy.exploration if isinstance(policy, ExploringPolicy) else None
        self._extras: Any = None  # Of the last step, where the policy returns (actions, extras).

    def flush(self) -> None:
        """Makes the queued adder calls, in order; one that raises drops those after it."""
        pending = self._pending
        self._pending = []
        for call in pending:
            call()

    def select_action(self, observations: Any) -> np.ndarray:
        outputs, self._key = self._act(self._client.params, self._key, observations, *self._inputs())
        self.flush()  # While XLA computes the actions.
        return np.asarray(self._actions(outputs), dtype=self._action_dtype)

    def _inputs(self) -> tuple[Any, ...]:
        return (self.step_count,)

    def _actions(self, outputs: Any) -> Any:  # The actions of the outputs; extras are kept for the adder.
        if not isinstance(outputs, tuple):
            return outputs
        actions, extras = outputs
        self._extras = {name: np.asarray(value) for name, value in extras.items()}
        return actions

    def get_state(self) -> dict[str, Any]:
        """What a deterministic run saves so that a resumed actor acts as this one would have."""
        self.flush()
        return {
            "key": np.asarray(self._key),
            "step": self.step_count,
            "client": self._client.get_state(),
            "adder": None if self._adder is None else self._adder.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._key = jax.numpy.asarray(state["key"])
        self.step_count = int(state["step"])
        self._client.set_state(state["client"])
        if self._adder is not None:
            self._adder.set_state(state["adder"])

    def exploration_metrics(self) -> dict[str, float]:
        """The policy's exploration at this actor's step (`{"epsilon": ...}`; empty if none)."""
        return {} if self._exploration is None else self._exploration(self.step_count)

    def _to_adder(self, method: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        self._pending.append(functools.partial(method, *args, **kwargs))
        if not self._defer:
            self.flush()

    def observe_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        if self._adder is not None:
            self._to_adder(self._adder.add_first, timestep, env_ids)

    def observe(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        self.step_count += len(next_timestep.step_type)
        if self._adder is not None:  # An evaluator's actor has none: nothing to queue, no extras to gather.
            self._to_adder(self._adder.add, actions, next_timestep, env_ids, **self._extras_of(env_ids))

    def _extras_of(self, env_ids: Sequence[int] | None) -> dict[str, Any]:  # More `adder.add` arguments.
        if self._extras is None:
            return {}
        if env_ids is None:
            return {"extras": self._extras}
        return {"extras": tree.map_structure(lambda value: value[env_ids], self._extras)}

    def update(self, wait: bool = False) -> None:
        self._client.update(wait)

    @property
    def adder(self) -> Adder | None:
        """The adder, its queued calls made (so its state and `num_items` are current)."""
        self.flush()
        return self._adder

    @adder.setter
    def adder(self, adder: Adder | None) -> None:
        """A new adder (a new connection to replay); calls queued for the old one are dropped."""
        self._pending = []
        self._adder = adder


@dataclasses.dataclass(frozen=True)
class RecurrentPolicy:
    """A policy with memory: `step(params, key, observations, core_state, actor_step) ->
    (actions, next core_state)` and `initial_state(copies)` (numpy arrays, a row per copy)."""

    step: Callable[[Any, jax.Array, Any, Any, jax.Array], tuple[jax.Array, Any]]
    initial_state: Callable[[int], Any]
    exploration: Exploration | None = None


class RecurrentActor(FeedForwardActor):
    """Carries each copy's core state across steps (reset when its episode starts, committed
    for the copies stepped); the adder gets the state each acted from as `{"core_state": ...}`."""

    def __init__(self, policy: RecurrentPolicy, *args: Any, **kwargs: Any):
        super().__init__(policy.step, *args, **kwargs)
        self._exploration = policy.exploration
        self._initial_state = policy.initial_state
        self._state: Any = None  # Per copy: the state the next action is chosen from.
        self._next_state: Any = None  # Per copy: the state after the last chosen action.

    @property
    def state(self) -> Any:  # Every copy's current core state (numpy arrays).
        return self._state

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "core_state": self._state, "next_core_state": self._next_state}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._state = state["core_state"]
        self._next_state = state["next_core_state"]

    def _reserve(self, copies: int) -> None:  # Copies never seen before start from the initial state.
        have = 0 if self._state is None else len(tree.flatten(self._state)[0])
        if copies > have:
            fresh = tree.map_structure(np.array, self._initial_state(copies))
            for new, old in zip(tree.flatten(fresh), tree.flatten(self._state or {})):
                new[:have] = old
            self._state = fresh

    def observe_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        count = len(timestep.step_type)
        rows = np.arange(count) if env_ids is None else np.asarray(env_ids)
        self._reserve(int(rows.max()) + 1)
        for current, initial in zip(tree.flatten(self._state), tree.flatten(self._initial_state(count))):
            current[rows] = initial
        super().observe_first(timestep, env_ids)

    def select_action(self, observations: Any) -> np.ndarray:
        self._reserve(len(tree.flatten(observations)[0]))
        return super().select_action(observations)

    def _inputs(self) -> tuple[Any, ...]:
        return self._state, self.step_count

    def _actions(self, outputs: Any) -> Any:
        actions, self._next_state = outputs
        return actions

    def observe(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        rows = slice(None) if env_ids is None else np.asarray(env_ids)
        self._extras = {"core_state": tree.map_structure(np.copy, self._state)}  # The states acted from.
        for current, following in zip(tree.flatten(self._state), tree.flatten(self._next_state)):
            current[rows] = np.asarray(following)[rows]
        super().observe(actions, next_timestep, env_ids)
