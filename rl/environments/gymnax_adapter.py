"""A gymnax environment as a dm_env.Environment, so `environment=gymnax` also runs under
`launcher=local` and `launcher=ray` (one jitted call per step: slow, for checking that a
compiled run and a reverb run see the same task).

`make_gymnax_environment` (rl/environments/gymnax_factory.py, the `_target_` of
conf/environment/gymnax.yaml) carries `jax_native = True`: `launcher=anakin` reads the
name and options from the factory and builds the pure-function vector environment
(rl/environments/gymnax_vector.py) instead.
"""

from __future__ import annotations

from typing import Any

import dm_env
import jax
import numpy as np

from rl.environments.gymnax_vector import action_spec, make_gymnax, observation_spec, single_step


class GymnaxToDmEnv(dm_env.Environment):
    """One gymnax environment stepped from Python; its keys come from `seed`.

    An episode that ends by the time limit is a truncation (discount 1), one that ends by
    the task a termination (discount 0), as for the gymnasium adapter.
    """

    def __init__(self, name: str, seed: int, kwargs: dict[str, Any] | None = None):
        self._environment, self._params = make_gymnax(name, kwargs)
        self._observation_spec = observation_spec(self._environment, self._params)
        self._action_spec = action_spec(self._environment, self._params)
        # Made at the first reset: an experiment probes its environment for specs before it
        # switches JAX's compilation cache on, and the first compilation decides (once per
        # process) whether the cache is used.
        self._seed = int(seed)
        self._key = None
        self._state = None
        self._reset = jax.jit(lambda key: self._environment.reset_env(key, self._params))
        self._step = jax.jit(
            lambda key, state, action: single_step(self._environment, self._params, key, state, action)
        )

    def _next_key(self) -> jax.Array:
        if self._key is None:
            self._key = jax.random.PRNGKey(self._seed)
        self._key, key = jax.random.split(self._key)
        return key

    def reset(self) -> dm_env.TimeStep:
        observation, self._state = self._reset(self._next_key())
        return dm_env.restart(np.asarray(observation, np.float32))

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._state is None:
            return self.reset()
        action = np.asarray(action, self._action_spec.dtype).reshape(self._action_spec.shape)
        observation, self._state, reward, done, truncated = self._step(self._next_key(), self._state, action)
        observation = np.asarray(observation, np.float32)
        reward = np.float32(reward)
        if not bool(done):
            return dm_env.transition(reward, observation)
        self._state = None
        if bool(truncated):
            return dm_env.truncation(reward, observation)
        return dm_env.termination(reward, observation)

    def observation_spec(self) -> Any:
        return self._observation_spec

    def action_spec(self) -> Any:
        return self._action_spec

    def reward_spec(self) -> Any:
        return dm_env.specs.Array((), np.float32, "reward")

    def discount_spec(self) -> Any:
        return dm_env.specs.BoundedArray((), np.float32, 0.0, 1.0, "discount")
