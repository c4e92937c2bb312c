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


def stack(items: Sequence[Any]) -> Any:
    """Stacks a list of (possibly nested) arrays along a new leading axis."""
    first = items[0]
    if isinstance(first, np.ndarray):
        return np.stack(items)
    return tree.map_structure(lambda *xs: np.stack(xs), *items)


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
        return dm_env.TimeStep(
            step_type=np.array([t.step_type for t in timesteps], dtype=np.int8),
            reward=np.array([0.0 if t.reward is None else t.reward for t in timesteps], dtype=np.float32),
            discount=np.array([1.0 if t.discount is None else t.discount for t in timesteps], dtype=np.float32),
            observation=stack([t.observation for t in timesteps]),
        )

    def reset(self, env_ids: Sequence[int] | np.ndarray | None = None) -> dm_env.TimeStep:
        """Starts a new episode in the copies named (all by default)."""
        return self._batch([self.environments[i].reset() for i in self._ids(env_ids)])

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> dm_env.TimeStep:
        """Steps the copies named (all by default); `actions[k]` goes to `env_ids[k]`."""
        ids = self._ids(env_ids)
        return self._batch([self.environments[i].step(actions[k]) for k, i in enumerate(ids)])

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
