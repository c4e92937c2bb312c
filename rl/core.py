"""The interfaces every agent and launcher is written against, small so that a single-process
loop or a distributed launcher can run an actor, a learner or a whole experiment unchanged."""

from __future__ import annotations

import abc
from typing import Any, Generic, Sequence, TypeVar

import dm_env

State = TypeVar("State")


class VariableSource(abc.ABC):
    """Something that serves named variables (network parameters) to actors."""

    @abc.abstractmethod
    def get_variables(self, names: Sequence[str]) -> list[Any]:
        """Returns the current value of each named variable, in order."""


class Actor(abc.ABC):
    """Chooses actions and feeds the experience it sees to replay, batched over the copies of
    a vector environment; `env_ids` names the copies a batched timestep's rows belong to."""

    @abc.abstractmethod
    def select_action(self, observations: Any) -> Any:
        """Returns one action per row of `observations`."""

    @abc.abstractmethod
    def observe_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        """Records the first timestep of an episode in each copy named."""

    @abc.abstractmethod
    def observe(self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        """Records the actions taken and the timesteps they led to."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Refreshes the actor's parameters from its variable source."""

    def flush(self) -> None:
        """Makes any replay writes the actor has queued (none by default)."""

    def exploration_metrics(self) -> dict[str, float]:
        """The exploration it acts with now (epsilon, noise scale), for episode records."""
        return {}


class Learner(VariableSource, Generic[State]):
    """Consumes replayed experience and improves the parameters it serves."""

    @abc.abstractmethod
    def step(self) -> None:
        """Performs one update (possibly several fused SGD steps)."""

    @abc.abstractmethod
    def save(self) -> State:
        """Returns the learner's whole state as a pytree, for checkpoints."""

    @abc.abstractmethod
    def restore(self, state: State) -> None:
        """Replaces the learner's state by one returned from `save`."""
