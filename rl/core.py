"""The interfaces every agent and launcher is written against.

Keeping these small means an actor, a learner or a whole experiment can be run by a
single-process loop or by a distributed launcher without changing agent code.
"""

from __future__ import annotations

import abc
from typing import Any, Generic, Sequence, TypeVar

import dm_env

Params = Any
State = TypeVar("State")


class VariableSource(abc.ABC):
    """Something that serves named variables (network parameters) to actors."""

    @abc.abstractmethod
    def get_variables(self, names: Sequence[str]) -> list[Any]:
        """Returns the current value of each named variable, in order."""


class Worker(abc.ABC):
    """A long-running node of an experiment (learner, actor loop, evaluator)."""

    @abc.abstractmethod
    def run(self) -> None:
        """Runs until the experiment tells it to stop."""


class Actor(abc.ABC):
    """Chooses actions and feeds the experience it sees to replay."""

    @abc.abstractmethod
    def select_action(self, observation: Any) -> Any:
        """Returns the action to take for this observation."""

    @abc.abstractmethod
    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        """Records the first timestep of an episode."""

    @abc.abstractmethod
    def observe(self, action: Any, next_timestep: dm_env.TimeStep) -> None:
        """Records the action taken and the timestep it led to."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Refreshes the actor's parameters from its variable source."""


class Learner(VariableSource, Worker, Generic[State]):
    """Consumes replayed experience and improves the parameters it serves."""

    @abc.abstractmethod
    def step(self) -> None:
        """Performs one update (possibly several fused SGD steps)."""

    def run(self, num_steps: int | None = None) -> None:
        steps = 0
        while num_steps is None or steps < num_steps:
            self.step()
            steps += 1

    @abc.abstractmethod
    def save(self) -> State:
        """Returns the learner's whole state as a pytree, for checkpoints."""

    @abc.abstractmethod
    def restore(self, state: State) -> None:
        """Replaces the learner's state by one returned from `save`."""
