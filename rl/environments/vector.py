"""Copies of one environment stepped together (one batched policy call); copy `i` behaves exactly
as the environment made alone with its seed."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import dm_env
import numpy as np
import tree


def vector_seeds(seed: int, num_envs: int) -> list[int]:
    """The uint32 seeds of `num_envs` copies: `seed`, `seed + 1`, ... (as gymnasium's)."""
    return [(int(seed) + i) % 2**32 for i in range(num_envs)]


def stack(items: Sequence[Any]) -> Any:
    """Stacks (possibly nested) arrays along a new leading axis (a copy)."""
    first = items[0]
    if not isinstance(first, np.ndarray) and tree.is_nested(first):
        return tree.map_structure(lambda *xs: stack(xs), *items)
    if isinstance(first, np.ndarray) and first.dtype != object:
        # np.array of equally shaped arrays is np.stack's result at a third of its cost.
        stacked = np.array(items)
        if stacked.shape == (len(items), *first.shape) and stacked.dtype == first.dtype:
            return stacked
    return np.stack(items)


class VectorEnvironment:
    """`num_envs` dm_envs behind one batched interface (fields with a leading (len(env_ids),) axis); a copy
    whose step was its episode's last is `reset(env_ids=...)` before its next step."""

    def __init__(self, environments: Sequence[dm_env.Environment]):
        if not environments:
            raise ValueError("a vector environment needs at least one environment")
        self.environments, self.num_envs = list(environments), len(environments)
        self._all = np.arange(self.num_envs)

    @classmethod
    def make(cls, factory: Callable[..., dm_env.Environment], seed: int, num_envs: int) -> "VectorEnvironment":
        return cls([factory(seed=s) for s in vector_seeds(seed, num_envs)])

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
        return self._all if env_ids is None else np.asarray(env_ids, dtype=np.int64)

    @staticmethod
    def _batch(timesteps: Sequence[dm_env.TimeStep]) -> dm_env.TimeStep:
        # Columns by zip: half a comprehension's cost per field.
        step_types, rewards, discounts, observations = zip(*timesteps)
        return dm_env.TimeStep(
            step_type=np.array(step_types, dtype=np.int8),
            reward=np.array([0.0 if r is None else r for r in rewards], dtype=np.float32),
            discount=np.array([1.0 if d is None else d for d in discounts], dtype=np.float32),
            observation=stack(observations),
        )

    def reset(self, env_ids: Sequence[int] | np.ndarray | None = None) -> dm_env.TimeStep:
        """Starts a new episode in the copies named (all by default)."""
        return self._batch([self.environments[i].reset() for i in self._ids(env_ids).tolist()])

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> dm_env.TimeStep:
        """Steps the copies named (all by default); `actions[k]` goes to `env_ids[k]`."""
        if env_ids is None:  # Every copy, in order (the usual step): no index arrays.
            return self._batch([environment.step(action) for environment, action in zip(self.environments, actions)])
        environments = self.environments
        return self._batch([environments[i].step(actions[k]) for k, i in enumerate(self._ids(env_ids).tolist())])

    def game_scores(self, env_ids: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """The game's own score for each copy named whose last step ended a game (Atari); NaN for the others."""
        scores = [self.environments[i].game_score for i in self._ids(env_ids).tolist()]
        return np.array([np.nan if s is None else s for s in scores], np.float64)

    def observation_spec(self) -> Any:
        return self.environments[0].observation_spec()

    def action_spec(self) -> Any:
        return self.environments[0].action_spec()

    def reward_spec(self) -> Any:
        return self.environments[0].reward_spec()

    def discount_spec(self) -> Any:
        return self.environments[0].discount_spec()

    def render(self) -> Any:
        """The first copy's frame (what a video of this vector shows)."""
        return self.environments[0].render()

    def close(self) -> None:
        for environment in self.environments:
            environment.close()
