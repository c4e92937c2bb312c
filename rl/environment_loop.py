"""Runs an actor in an environment, episode after episode, and logs each episode."""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol, Sequence

import dm_env
import numpy as np

from rl import core
from rl.counting import Counter
from rl.loggers.base import Logger, NoOpLogger


class Observer(Protocol):
    """Watches the loop (for episode statistics or video) and reports metrics per episode."""

    def observe_first(self, environment: dm_env.Environment, timestep: dm_env.TimeStep) -> None: ...

    def observe(self, environment: dm_env.Environment, timestep: dm_env.TimeStep, action: Any) -> None: ...

    def get_metrics(self) -> dict[str, Any]: ...


class EnvironmentLoop(core.Worker):
    def __init__(
        self,
        environment: dm_env.Environment,
        actor: core.Actor,
        counter: Counter | None = None,
        logger: Logger | None = None,
        observers: Sequence[Observer] = (),
        should_update: bool = True,
    ):
        self.environment = environment
        self.actor = actor
        self.counter = counter or Counter()
        self.logger = logger or NoOpLogger()
        self._observers = list(observers)
        self._should_update = should_update
        self._timestep: dm_env.TimeStep | None = None
        self._episode: dict[str, Any] = {}

    def _begin_episode(self) -> None:
        self._timestep = self.environment.reset()
        self.actor.observe_first(self._timestep)
        for observer in self._observers:
            observer.observe_first(self.environment, self._timestep)
        self._episode = {"return": 0.0, "length": 0, "start": time.perf_counter()}

    def step(self) -> dict[str, Any] | None:
        """Takes one environment step; returns the episode's record when it ends.

        Exposing single steps lets a single-process runner interleave acting and learning.
        """
        if self._timestep is None:
            self._begin_episode()
        action = self.actor.select_action(self._timestep.observation)
        timestep = self.environment.step(action)
        self.actor.observe(action, timestep)
        for observer in self._observers:
            observer.observe(self.environment, timestep, action)
        if self._should_update:
            self.actor.update()
        self._episode["return"] += float(np.sum(timestep.reward))
        self._episode["length"] += 1
        self._timestep = timestep
        if not timestep.last():
            return None
        return self._end_episode()

    def _end_episode(self) -> dict[str, Any]:
        length = self._episode["length"]
        duration = time.perf_counter() - self._episode["start"]
        counts = self.counter.increment(episodes=1, steps=length - self._episode.get("counted", 0))
        record = {
            **counts,
            "episode_return": self._episode["return"],
            "episode_length": length,
            "steps_per_second": length / max(duration, 1e-9),
        }
        for observer in self._observers:
            record.update(observer.get_metrics())
        self.logger.write(record)
        self._timestep = None
        return record

    def count_partial_episode(self) -> None:
        """Counts the steps of an unfinished episode (at a step budget), once."""
        if self._timestep is not None:
            uncounted = self._episode["length"] - self._episode.get("counted", 0)
            if uncounted:
                self.counter.increment(steps=uncounted)
            self._episode["counted"] = self._episode["length"]

    def run_episode(self) -> dict[str, Any]:
        while True:
            record = self.step()
            if record is not None:
                return record

    def run(
        self,
        num_episodes: int | None = None,
        num_steps: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs whole episodes until a limit is reached (or forever with none)."""
        records: list[dict[str, Any]] = []
        steps = 0
        while not (
            (num_episodes is not None and len(records) >= num_episodes)
            or (num_steps is not None and steps >= num_steps)
            or (should_stop is not None and should_stop())
        ):
            record = self.run_episode()
            steps += record["episode_length"]
            records.append(record)
        return records
