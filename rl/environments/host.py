"""Environment copies stepped on the host for launcher=sebulba: one batched `step(actions)` that resets a copy
as soon as its episode ends (the observation returned is then the new episode's, the ended one's last is
`final_observation`), answering with the same `EnvStep` fields a compiled gymnax environment gives. Two routes:
any dm_env the experiment makes, as copies stepped one after another (gymnasium, MuJoCo, dm_control), and
Atari games in ale-py's own vector environment (`rl.environments.atari.AleVector`, its C++ threads)."""

from __future__ import annotations

import abc
from typing import Callable, Sequence

import dm_env
import numpy as np

from rl.environments.gymnax_vector import EnvStep
from rl.environments.vector import VectorEnvironment


def copy_seeds(*entropy: int, count: int) -> np.ndarray:
    """`count` uint32 environment seeds drawn from `entropy` (a replica's seed, its actor thread, the run's
    session...): the same numbers give the same seeds, any other numbers independent ones."""
    return np.random.SeedSequence([int(value) % 2**32 for value in entropy]).generate_state(count)


class HostVector(abc.ABC):
    """`num_envs` copies with auto-reset; `step` returns numpy arrays (num_envs, ...) in `EnvStep`'s fields.
    An episode's return and length are reported on the step that ends it (0 elsewhere), of the rewards the
    learner sees; `game_scores()` holds, for Atari, the unclipped score of a whole game ended at the last step
    (NaN elsewhere)."""

    num_envs: int

    @abc.abstractmethod
    def reset(self) -> np.ndarray:
        """Starts every copy's first episode; returns their observations."""

    @abc.abstractmethod
    def step(self, actions: np.ndarray) -> EnvStep: ...

    def game_scores(self) -> np.ndarray:
        return np.full(self.num_envs, np.nan)

    def close(self) -> None:
        """Frees the copies (their threads, their simulators)."""


class EpisodeCounter:
    """Each copy's running return and length, reported (and restarted) where an episode ends."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, np.float32)
        self.lengths = np.zeros(num_envs, np.int32)

    def add(self, reward: np.ndarray, done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.returns += reward
        self.lengths += 1
        ended_returns = np.where(done, self.returns, 0.0).astype(np.float32)
        ended_lengths = np.where(done, self.lengths, 0).astype(np.int32)
        self.returns[done] = 0.0
        self.lengths[done] = 0
        return ended_returns, ended_lengths


class DmEnvCopies(HostVector):
    """dm_env copies (a `VectorEnvironment`) behind the host interface: a copy whose step was LAST is reset
    before `step` returns. Discount 0 is a termination; LAST with discount 1 is a time limit (truncated)."""

    def __init__(self, environments: VectorEnvironment):
        self.environments = environments
        self.num_envs = environments.num_envs
        self.episodes = EpisodeCounter(self.num_envs)

    @classmethod
    def make(cls, factory: Callable[..., dm_env.Environment], seeds: Sequence[int]) -> "DmEnvCopies":
        return cls(VectorEnvironment([factory(seed=int(seed)) for seed in seeds]))

    def reset(self) -> np.ndarray:
        return np.asarray(self.environments.reset().observation)

    def step(self, actions: np.ndarray) -> EnvStep:
        timestep = self.environments.step(actions)
        done = timestep.step_type == dm_env.StepType.LAST
        reward = np.asarray(timestep.reward, np.float32)
        final_observation = np.asarray(timestep.observation)
        observation = final_observation
        if done.any():
            ended = np.flatnonzero(done)
            observation = final_observation.copy()
            observation[ended] = self.environments.reset(ended).observation
        episode_return, episode_length = self.episodes.add(reward, done)
        return EnvStep(
            observation=observation,
            reward=reward,
            discount=np.asarray(timestep.discount, np.float32),
            done=done,
            truncated=done & (np.asarray(timestep.discount) > 0),
            final_observation=final_observation,
            episode_return=episode_return,
            episode_length=episode_length,
        )

    def close(self) -> None:
        self.environments.close()
