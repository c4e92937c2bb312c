"""Runs an actor in a `VectorEnvironment`: one batched policy call per step for every copy, each
copy's episodes counted and logged on their own; an evaluation loop logs once per round."""

from __future__ import annotations

import copy
import pickle
import time
from typing import Any, Sequence

import dm_env
import numpy as np
import tree

from rl import core
from rl.counting import Counter
from rl.environments.vector import VectorEnvironment
from rl.loggers.base import Logger, NoOpLogger
from rl.observers import Observer

# Keys of an episode record that are not an observer's metric.
EPISODE_KEYS = ("episode_return", "episode_length", "steps_per_second")
# The run's counts before anything was counted: an evaluation record holds them at the untrained policy's round
# (actor step 0), so that every row of evaluator.csv has its x-axis and the same columns.
COUNTS_BEFORE_ACTING = {"actor_steps": 0, "actor_episodes": 0, "learner_steps": 0}
# dm_env.StepType.LAST as a plain int: an enum member's lookup costs on every step.
LAST = int(dm_env.StepType.LAST)


def return_statistics(returns: Any) -> dict[str, float]:
    """The mean, standard deviation, minimum and maximum of episode returns, as record keys."""
    statistics = {"": np.mean, "_std": np.std, "_min": np.min, "_max": np.max}
    return {f"episode_return{suffix}": float(statistic(returns)) for suffix, statistic in statistics.items()}


def _replace_rows(batch: Any, rows: np.ndarray | None, values: Any) -> Any:
    """A copy of `batch` with `rows` replaced (adders may still hold views of the original)."""
    if rows is None:
        return values

    def replace(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        updated = old.copy()
        updated[rows] = new
        return updated

    return tree.map_structure(replace, batch, values)


class EnvironmentLoop:
    def __init__(
        self,
        environment: VectorEnvironment | dm_env.Environment,
        actor: core.Actor,
        counter: Counter | None = None,
        logger: Logger | None = None,
        observers: Sequence[Observer] = (),
        evaluation: bool = False,
    ):
        if isinstance(environment, dm_env.Environment):
            environment = VectorEnvironment([environment])
        self.environment = environment
        self.num_envs = environment.num_envs
        self.actor = actor
        self.counter = counter or Counter()
        self.logger = logger or NoOpLogger()
        self.observers = list(observers)
        self.evaluation = evaluation
        self._all_ids = np.arange(self.num_envs)
        self._observation: Any = None  # What the policy acts on next, one row per copy.
        self._returns = np.zeros(self.num_envs, np.float64)
        self._lengths = np.zeros(self.num_envs, np.int64)
        self._uncounted_steps = 0
        self.steps_taken = 0
        self._rate_steps = 0
        self._rate_start = time.perf_counter()
        self.ended_ids: list[int] = []  # The copies whose episode ended at the last step.
        self.round_started_at: float | None = None

    def _begin_episodes(self, env_ids: np.ndarray | None = None) -> None:
        timestep = self.environment.reset(env_ids)
        self.actor.observe_first(timestep, env_ids)
        ids = self._all_ids if env_ids is None else env_ids
        for observer in self.observers:
            observer.observe_first(self.environment, timestep, ids)
        self._observation = _replace_rows(self._observation, env_ids, timestep.observation)
        self._returns[ids] = 0.0
        self._lengths[ids] = 0

    def step(self, env_ids: np.ndarray | None = None, restart: bool = True) -> list[dict[str, Any]]:
        """Steps the copies named (all by default) once; returns the records of the episodes that
        ended, whose copies start anew unless `restart` is False."""
        if self._observation is None:
            self._begin_episodes()
        actions = self.actor.select_action(self._observation)
        if env_ids is not None:
            actions = actions[env_ids]
        timestep = self.environment.step(actions, env_ids)
        self.actor.observe(actions, timestep, env_ids)
        ids = self._all_ids if env_ids is None else np.asarray(env_ids)
        for observer in self.observers:
            observer.observe(self.environment, timestep, actions, ids)
        if not self.evaluation:
            self.actor.update()
        count = len(timestep.step_type)
        self._returns[ids] += timestep.reward
        self._lengths[ids] += 1
        self._observation = _replace_rows(self._observation, env_ids, timestep.observation)
        self._uncounted_steps += count
        self.steps_taken += count
        self._rate_steps += count
        ended = timestep.step_type == LAST
        self.ended_ids = ids[ended].tolist()
        records = [self._end_episode(env_id) for env_id in self.ended_ids]
        if restart and records:
            self._begin_episodes(ids[ended])
        return records

    def _end_episode(self, env_id: int) -> dict[str, Any]:
        counts = self.counter.increment(episodes=1, steps=self._uncounted_steps)
        self._uncounted_steps = 0
        now = time.perf_counter()
        record = {
            **counts,
            "episode_return": float(self._returns[env_id]),
            "episode_length": int(self._lengths[env_id]),
            "steps_per_second": self._rate_steps / max(now - self._rate_start, 1e-9),
        }
        self._rate_steps = 0
        self._rate_start = now
        record.update(self.actor.exploration_metrics())
        for observer in self.observers:
            record.update(observer.get_metrics(env_id))
        if not self.evaluation:
            self.logger.write(record)
        return record

    def get_state(self) -> dict[str, Any]:
        """What an exact resume continues from (not observers' statistics)."""
        return {
            "environment": pickle.dumps(self.environment, protocol=pickle.HIGHEST_PROTOCOL),
            "observation": copy.copy(self._observation),
            "returns": copy.copy(self._returns),
            "lengths": copy.copy(self._lengths),
            "uncounted_steps": copy.copy(self._uncounted_steps),
            "steps_taken": copy.copy(self.steps_taken),
            "actor": self.actor.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.environment.close()
        self.environment = pickle.loads(state["environment"])
        self._observation = state["observation"]
        self._returns = state["returns"]
        self._lengths = state["lengths"]
        self._uncounted_steps = state["uncounted_steps"]
        self.steps_taken = state["steps_taken"]
        self.actor.set_state(state["actor"])

    def flush(self) -> None:
        self.actor.flush()

    def count_partial_episode(self) -> None:
        """Counts the steps of unfinished episodes and flushes the actor."""
        self.actor.flush()
        if self._uncounted_steps:
            self.counter.increment(steps=self._uncounted_steps)
            self._uncounted_steps = 0

    def drop_episodes(self) -> None:
        """Abandons every copy's episode: a rebuilt replay connection's adder starts afresh."""
        self.count_partial_episode()
        self._observation = None

    def run_steps(self, num_steps: int) -> list[dict[str, Any]]:
        """Takes exactly `num_steps` environment steps (all copies together)."""
        records: list[dict[str, Any]] = []
        for taken in range(0, num_steps, self.num_envs):
            count = min(self.num_envs, num_steps - taken)
            records += self.step(None if count == self.num_envs else np.arange(count))
        self.actor.flush()
        return records

    def run_episodes(self, num_episodes: int) -> list[dict[str, Any]]:
        """Plays exactly `num_episodes` fresh episodes on all copies at once; their records in ending order."""
        started = min(self.num_envs, num_episodes)
        self._begin_episodes(None if self._observation is None else np.arange(started))
        active = list(range(started))
        records: list[dict[str, Any]] = []
        while active:
            records += self.step(np.asarray(active), restart=False)
            for env_id in self.ended_ids:
                if started < num_episodes:
                    self._begin_episodes(np.asarray([env_id]))
                    started += 1
                else:
                    active.remove(env_id)
        self.actor.flush()
        return records

    def run_evaluation(self, num_episodes: int) -> dict[str, Any]:
        """One round with the newest parameters: one record of the counts, the return's spread, the
        mean length and the observers' metrics (numbers averaged).

        Two other loops evaluate on purpose: `rl.systems.base.evaluate` (launcher=anakin), a traced
        `while_loop` over a JAX environment's copies inside the compiled program, and
        `rl.sebulba.nodes.evaluation_round` (launcher=sebulba), host copies stepped in a batch with the compiled
        evaluation policy, beside acting; this one steps one environment at a time (gymnasium, ale-py,
        dm_control), with observers and videos."""
        self.actor.update(wait=True)
        self.round_started_at = time.time()  # When the evaluated parameters were taken.
        records = self.run_episodes(num_episodes)
        record: dict[str, Any] = {
            **COUNTS_BEFORE_ACTING,
            **self.counter.get_counts(),
            **return_statistics(np.array([r["episode_return"] for r in records], dtype=np.float64)),
            "episode_length": float(np.mean([r["episode_length"] for r in records])),
            "episodes": num_episodes,
        }
        for key in dict.fromkeys(k for r in records for k in r if k not in record and k not in EPISODE_KEYS):
            values = [r[key] for r in records if key in r]
            numeric = all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values)
            record[key] = float(np.mean(values)) if numeric else values[0]
        self.logger.write(record)
        return record
