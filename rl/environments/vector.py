"""Several copies of one environment stepped together, so an actor acts for all of them
with a single batched policy call.

Each copy is an ordinary seeded dm_env environment: copy `i` of a vector behaves exactly as
the same environment made alone with the same seed. Timesteps come back batched (a leading
axis over the copies stepped); a copy whose episode ends is reset on request, so the loop
sees the terminal step (for replay and episode statistics) before the first observation
of the next episode.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import dm_env
import numpy as np
import tree

# Seeds of consecutive copies differ by one, as in gymnasium's vector environments; a
# vector of one copy is seeded exactly like a single environment.
UINT32 = 2**32


def vector_seeds(seed: int, num_envs: int) -> list[int]:
    """The uint32 environment seeds of `num_envs` copies whose first copy gets `seed`."""
    return [(int(seed) + i) % UINT32 for i in range(num_envs)]


def _stack_leaves(leaves: Sequence[Any]) -> np.ndarray:
    # np.array of a list of equally shaped arrays is np.stack's result (a copy) at a
    # third of its cost (np.stack checks and expands each array in Python); stack
    # remains the fallback for what np.array would not stack the same way.
    first = leaves[0]
    if isinstance(first, np.ndarray) and first.dtype != object:
        stacked = np.array(leaves)
        if stacked.shape == (len(leaves), *first.shape) and stacked.dtype == first.dtype:
            return stacked
    return np.stack(leaves)


def stack(items: Sequence[Any]) -> Any:
    """Stacks a list of (possibly nested) arrays along a new leading axis (a copy)."""
    if isinstance(items[0], np.ndarray):
        return _stack_leaves(items)
    return tree.map_structure(lambda *xs: _stack_leaves(xs), *items)


class VectorEnvironment:
    """`num_envs` dm_env environments behind one batched interface.

    `step(actions, env_ids)` steps the copies named by `env_ids` (all by default) with one
    action each and returns their timesteps stacked: `step_type`, `reward` and `discount`
    of shape (len(env_ids),), observations with that leading axis. A copy whose step was
    the last of its episode must be `reset(env_ids=...)` before it is stepped again.
    """

    def __init__(self, environments: Sequence[dm_env.Environment]):
        if not environments:
            raise ValueError("a vector environment needs at least one environment")
        self.environments = list(environments)
        self.num_envs = len(self.environments)
        self._all = np.arange(self.num_envs)

    @classmethod
    def make(cls, factory: Callable[..., dm_env.Environment], seed: int, num_envs: int) -> "VectorEnvironment":
        return cls([factory(seed=s) for s in vector_seeds(seed, num_envs)])

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
        return self._all if env_ids is None else np.asarray(env_ids, dtype=np.int64)

    @staticmethod
    def _batch(timesteps: Sequence[dm_env.TimeStep]) -> dm_env.TimeStep:
        # One pass over the timesteps, columns by zip: half the cost of a comprehension
        # per field at one copy, a third at 32 (this runs on every actor step).
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
        """The game's own score for each copy named whose last step ended a game (Atari:
        `GymnasiumToDmEnv.game_score`); NaN for the others."""
        scores = [getattr(self.environments[i], "game_score", None) for i in self._ids(env_ids).tolist()]
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
