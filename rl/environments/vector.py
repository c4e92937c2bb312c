"""Copies of one environment stepped together (one batched policy call): dm_envs (copy `i` behaves
exactly as the environment made alone with its seed) or envpool's C++ thread pool."""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from typing import Any, Callable, Sequence

import dm_env
import numpy as np
import tree
from dm_env import specs

from rl.environments.specs import Float32Specs, space_to_spec


def vector_seeds(seed: int, num_envs: int) -> list[int]:
    """The uint32 seeds of `num_envs` copies: `seed`, `seed + 1`, ... (as gymnasium's)."""
    return [(int(seed) + i) % 2**32 for i in range(num_envs)]


def stack(items: Sequence[Any]) -> Any:
    """Stacks (possibly nested) arrays along a new leading axis (a copy)."""
    first = items[0]
    if not isinstance(first, np.ndarray) and tree.is_nested(first):
        return tree.map_structure(lambda *xs: stack(xs), *items)
    if isinstance(first, np.ndarray) and first.dtype != object:
        # np.stack's result without its per-item work.
        stacked = np.array(items)
        if stacked.shape == (len(items), *first.shape) and stacked.dtype == first.dtype:
            return stacked
    return np.stack(items)


class VectorEnvironment:
    """`num_envs` dm_envs behind one batched interface; a copy whose episode ended is `reset(env_ids=...)` next."""

    def __init__(self, environments: Sequence[dm_env.Environment]):
        if not environments:
            raise ValueError("a vector environment needs at least one environment")
        self.environments = list(environments)
        self.num_envs = len(environments)
        self._all = np.arange(self.num_envs)

    @classmethod
    def make(cls, factory: Callable[..., dm_env.Environment], seed: int, num_envs: int) -> "VectorEnvironment":
        return cls([factory(seed=s) for s in vector_seeds(seed, num_envs)])

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
        return self._all if env_ids is None else np.asarray(env_ids, dtype=np.int64)

    @staticmethod
    def _batch(timesteps: Sequence[dm_env.TimeStep]) -> dm_env.TimeStep:
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
        if env_ids is None:  # The usual step: no index arrays.
            return self._batch([environment.step(action) for environment, action in zip(self.environments, actions)])
        return self._batch([self.environments[i].step(actions[k]) for k, i in enumerate(self._ids(env_ids).tolist())])

    def game_scores(self, env_ids: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Atari: the game's own score for each copy named whose last step ended a game, else NaN."""
        scores = [self.environments[i].game_score for i in self._ids(env_ids).tolist()]
        return np.array([np.nan if s is None else s for s in scores], np.float64)

    def observation_spec(self) -> Any:
        return self.environments[0].observation_spec()

    def action_spec(self) -> Any:
        return self.environments[0].action_spec()

    def render(self) -> Any:
        """The first copy's frame (what a video of this vector shows)."""
        return self.environments[0].render()

    def close(self) -> None:
        for environment in self.environments:
            environment.close()


def quietly(function: Any, *args: Any, **kwargs: Any) -> Any:
    """`function(...)` with C-level stdout muted (MuJoCo tasks print a deprecation line on every make)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return function(*args, **kwargs)
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class EnvpoolVectorEnvironment(Float32Specs):
    """`num_envs` copies of envpool task `name` (`kwargs` go to `envpool.make`; no rendering). With
    `atari`: frames channels last, resets as envpool's auto-reset, `game_scores` of whole games."""

    def __init__(self, name: str, seed: int, num_envs: int, atari: bool = False, **kwargs: Any):
        try:
            import envpool
        except ImportError:
            raise ValueError("envpool is not installed (pip install envpool)") from None
        tasks = set(envpool.list_all_envs())
        if name not in tasks:
            close = difflib.get_close_matches(name, sorted(tasks), n=5, cutoff=0.6)
            hint = f"; close ones: {close}" if close else ""
            raise ValueError(
                f"envpool has no task '{name}'{hint}; environment.backend=gymnasium steps any gymnasium id"
            )
        self.name = name
        max_episode_steps = kwargs.pop("max_episode_steps", None)
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = int(max_episode_steps)
        with warnings.catch_warnings():  # Its float64 bounds cast to float32 spaces.
            warnings.simplefilter("ignore")
            self._pool = quietly(
                envpool.make, name, env_type="gymnasium", num_envs=num_envs, seed=int(seed) % 2**31, **kwargs
            )
            self._observation_spec = space_to_spec(self._pool.observation_space, "observation", float32=True)
            self._action_spec = space_to_spec(self._pool.action_space, "action")
        self._atari = atari
        if atari:
            frames, height, width = self._observation_spec.shape
            self._observation_spec = specs.BoundedArray((height, width, frames), np.uint8, 0, 255, "observation")
        self._action_dtype = self._pool.action_space.dtype
        self.num_envs = num_envs
        self._all = np.arange(num_envs, dtype=np.int32)
        self._scores = np.zeros(num_envs, np.float64)
        self._finished = np.full(num_envs, np.nan)
        self._played = np.zeros(num_envs, bool)

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
        return self._all if env_ids is None else np.asarray(env_ids, dtype=np.int32)

    def _observations(self, observations: np.ndarray, returned: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, Any]:
        """The rows in the order of `ids` (envpool answers in its own), at the spec's dtype."""
        order = None
        if not np.array_equal(returned, ids):
            row_of = {int(env_id): row for row, env_id in enumerate(returned)}
            order = np.array([row_of[int(env_id)] for env_id in ids])
        observations = np.asarray(observations, dtype=self._observation_spec.dtype)
        observations = observations if order is None else observations[order]
        return (np.ascontiguousarray(np.moveaxis(observations, 1, -1)) if self._atari else observations), order

    def reset(self, env_ids: Sequence[int] | np.ndarray | None = None) -> dm_env.TimeStep:
        ids = self._ids(env_ids)
        if self._atari and self._played[ids].all():
            observations, _, _, _, info = self._pool.step(np.zeros(len(ids), self._action_dtype), ids)
        else:
            self._played[ids] = True
            observations, info = self._pool.reset(ids)
        n = len(ids)
        first = np.full(n, dm_env.StepType.FIRST, np.int8)
        observations = self._observations(observations, info["env_id"], ids)[0]
        return dm_env.TimeStep(first, np.zeros(n, np.float32), np.ones(n, np.float32), observations)

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> dm_env.TimeStep:
        ids = self._ids(env_ids)
        observations, rewards, terminated, truncated, info = self._pool.step(
            np.asarray(actions, dtype=self._action_dtype), ids
        )
        observations, order = self._observations(observations, info["env_id"], ids)
        if self._atari:
            game_rewards = info["reward"]
            game_over = np.logical_or(info["terminated"], truncated)
            if order is not None:
                game_rewards = game_rewards[order]
                game_over = game_over[order]
            self._scores[ids] += game_rewards
            self._finished[ids] = np.where(game_over, self._scores[ids], np.nan)
            self._scores[ids[game_over.astype(bool)]] = 0.0
        if order is not None:
            rewards = rewards[order]
            terminated = terminated[order]
            truncated = truncated[order]
        return dm_env.TimeStep(
            step_type=np.where(terminated | truncated, dm_env.StepType.LAST, dm_env.StepType.MID).astype(np.int8),
            reward=np.asarray(rewards, np.float32),
            discount=np.where(terminated, 0.0, 1.0).astype(np.float32),
            observation=observations,
        )

    def game_scores(self, env_ids: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        return self._finished[self._ids(env_ids)]

    def render(self) -> Any:
        raise NotImplementedError("envpool environments do not render; use environment.backend=gymnasium for video")

    def close(self) -> None:
        self._pool.close()
