"""The interfaces every agent and launcher is written against."""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Generic, NamedTuple, Sequence, TypeVar

import dm_env
from dm_env import specs

State = TypeVar("State")


class VariableSource(abc.ABC):
    """Something that serves named variables (network parameters) to actors."""

    @abc.abstractmethod
    def get_variables(self, names: Sequence[str]) -> list[Any]:
        """Returns the current value of each named variable, in order."""


class Actor(abc.ABC):
    """Chooses actions and feeds its experience to replay, batched over a vector environment's
    copies; `env_ids` names the copies a batched timestep's rows belong to."""

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


class NumericalError(RuntimeError):
    """The learner produced a non-finite loss or parameter; names the step and the term."""


class Batch(NamedTuple):
    """A replayed minibatch and its importance weights (1 for uniform sampling)."""

    data: Any
    importance_weights: Any

    @classmethod
    def uniform(cls, data: Any) -> Batch:
        import jax  # Here: rl.core imports no JAX.

        size = jax.tree_util.tree_leaves(data)[0].shape[0]
        return cls(data, jax.numpy.ones((size,), jax.numpy.float32))


class Transition(NamedTuple):
    """One (possibly n-step) transition: the target is `reward + discount * value(next_observation)`."""

    observation: Any
    action: Any
    reward: Any
    discount: Any
    next_observation: Any


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    observations: Any
    actions: Any
    rewards: Any
    discounts: Any


def make_environment_spec(environment: dm_env.Environment) -> EnvironmentSpec:
    spec = environment.observation_spec(), environment.action_spec(), environment.reward_spec()
    return EnvironmentSpec(*spec, environment.discount_spec())


def is_discrete(action_spec: Any) -> bool:
    """True for a single categorical action, the only kind value-based agents can act in."""
    return isinstance(action_spec, specs.DiscreteArray)


def num_actions(action_spec: Any) -> int:
    if not is_discrete(action_spec):
        raise ValueError(f"expected a discrete action spec, got {action_spec}")
    return int(action_spec.num_values)


class VariableClient:
    """Fetches variable `key` from `source` every `update_period` calls to `update`."""

    def __init__(self, source: VariableSource, key: str = "policy", update_period: int = 1):
        self._source = source
        self._key = key
        self._update_period = max(1, int(update_period))
        self._calls = 0
        self._params: Any = None

    @property
    def params(self) -> Any:
        if self._params is None:
            self.update(wait=True)
        return self._params

    def update(self, wait: bool = False) -> None:
        self._calls += 1
        if wait or self._calls >= self._update_period:
            self._params = self._source.get_variables([self._key])[0]
            self._calls = 0

    def get_state(self) -> dict[str, Any]:
        return {"params": self._params, "calls": self._calls}

    def set_state(self, state: dict[str, Any]) -> None:
        self._params = state["params"]
        self._calls = int(state["calls"])
