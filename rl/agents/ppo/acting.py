"""An actor whose policy also returns per-step extras for replay (on-policy agents)."""

from __future__ import annotations

from typing import Any, Sequence

import dm_env
import numpy as np

from rl.agents.actors import FeedForwardActor


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
