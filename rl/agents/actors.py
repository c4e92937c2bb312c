"""Actors for feed-forward policies, shared by every agent: `FeedForwardActor`, and
`ExtrasActor` for on-policy agents (PPO, IMPALA) whose policy also returns per-step extras."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import dm_env
import jax
import numpy as np

from rl import core
from rl.variables import VariableClient

if TYPE_CHECKING:  # Replay (reverb, TensorFlow) loads when an adder is built.
    from rl.replay.adders import Adder

# (params, key, observations, actor_step) -> actions, for a batch of observations (one row
# per copy of a vector environment).
Policy = Callable[[Any, jax.Array, Any, jax.Array], jax.Array]


class FeedForwardActor(core.Actor):
    """Acts with a jitted policy on the latest parameters and feeds an adder, if any.

    Observations and actions are batched over the copies of a vector environment: one
    jitted call chooses the actions of every copy. Schedules (epsilon, warm-up) see the
    actor's environment steps, not its calls.
    """

    def __init__(
        self,
        policy: Policy,
        random_key: jax.Array,
        variable_client: VariableClient,
        adder: Adder | None = None,
        action_dtype: Any = None,
    ):
        def act(params: Any, key: jax.Array, observations: Any, step: jax.Array):
            key, policy_key = jax.random.split(key)
            return policy(params, policy_key, observations, step), key

        # One jitted call per step: key splitting happens inside it, not in Python.
        self._act = jax.jit(act)
        self._key = random_key
        self._client = variable_client
        self._adder = adder
        self._action_dtype = action_dtype
        self._step = 0

    def select_action(self, observations: Any) -> np.ndarray:
        actions, self._key = self._act(self._client.params, self._key, observations, self._step)
        return np.asarray(actions, dtype=self._action_dtype)

    @property
    def step_count(self) -> int:
        """Environment steps observed so far: where this actor's schedules (epsilon, warm-up) are."""
        return self._step

    @step_count.setter
    def step_count(self, value: int) -> None:
        """Resumes the schedules at `value` (an actor rebuilt after a fault)."""
        self._step = int(value)

    def observe_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        if self._adder is not None:
            self._adder.add_first(timestep, env_ids)

    def observe(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        self._step += len(next_timestep.step_type)
        if self._adder is not None:
            self._adder.add(actions, next_timestep, env_ids)

    def update(self, wait: bool = False) -> None:
        self._client.update(wait)

    @property
    def adder(self) -> Adder | None:
        return self._adder


class ExtrasActor(FeedForwardActor):
    """A `FeedForwardActor` whose policy returns `(actions, extras)`.

    `extras` (a dict of arrays with one row per environment copy, e.g. the behaviour
    policy's log-probabilities) go to the adder with the step they belong to, for the
    copies stepped (`SequenceAdder.add(..., extras=...)`). An evaluation policy returns
    empty extras.
    """

    _extras: Any = None

    def select_action(self, observations: Any) -> np.ndarray:
        (actions, extras), self._key = self._act(self._client.params, self._key, observations, self._step)
        self._extras = {name: np.asarray(value) for name, value in extras.items()}
        return np.asarray(actions, dtype=self._action_dtype)

    def observe(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        self._step += len(next_timestep.step_type)
        if self._adder is None:
            return
        extras = self._extras
        if env_ids is not None:
            extras = {name: value[env_ids] for name, value in extras.items()}
        self._adder.add(actions, next_timestep, env_ids, extras=extras)
