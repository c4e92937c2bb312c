"""What every agent provides so experiments can build its nodes without knowing it."""

from __future__ import annotations

import abc
from typing import Any, Iterator

import jax

from rl import core
from rl.agents.actors import Policy
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.specs import EnvironmentSpec


class ActorLearnerBuilder(abc.ABC):
    """Builds replay tables, adders, actors, learners and policies for one agent.

    `action_kind` ("discrete" or "continuous") lets configuration checks refuse an
    environment the agent cannot act in before anything starts.
    """

    action_kind: str = "discrete"
    # What the network factory must build (network factories carry the same attribute).
    network_kind: str = "q_values"

    @abc.abstractmethod
    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        """The reverb tables this agent writes to and samples from."""

    @abc.abstractmethod
    def make_adder(self, replay_client: Any) -> Any:
        """The adder an actor uses to write experience."""

    @abc.abstractmethod
    def make_dataset_iterator(self, replay_client: Any) -> Iterator[Any]:
        """Batches for the learner, read from replay."""

    @abc.abstractmethod
    def make_policy(self, networks: Any, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """The behaviour policy, or with `evaluation=True` the policy to evaluate."""

    @abc.abstractmethod
    def make_actor(
        self,
        random_key: jax.Array,
        policy: Policy,
        environment_spec: EnvironmentSpec,
        variable_source: core.VariableSource,
        adder: Any = None,
    ) -> core.Actor:
        """An actor acting with `policy` on parameters pulled from `variable_source`."""

    @abc.abstractmethod
    def make_learner(
        self,
        random_key: jax.Array,
        networks: Any,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> core.Learner:
        """The learner, consuming `dataset` and serving its parameters."""

    @property
    @abc.abstractmethod
    def replay_ratio(self) -> Any:
        """The `ReplayRatio` of the table the learner samples (for single-process runs)."""

    @property
    @abc.abstractmethod
    def samples_per_learner_step(self) -> int:
        """Items one `learner.step()` consumes."""
