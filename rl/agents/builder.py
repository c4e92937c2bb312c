"""The agent surface: what every agent's builder provides so that experiments can build its nodes (replay
tables, adder, dataset, actor, policies and its `Learning`, rl/systems/learning.py)."""

from __future__ import annotations

import abc
from typing import Any, Callable, ClassVar, Iterator

import jax
import numpy as np

from rl import core
from rl.agents.actors import FeedForwardActor
from rl.networks.base import NetworkKind
from rl.policies import EpsilonGreedy
from rl.replay.kinds import ReplayKind, Transitions
from rl.systems.base import CompiledAgent, Policy, System
from rl.systems.learning import Learning
from rl.core import EnvironmentSpec, VariableClient, is_discrete


class ActorLearnerBuilder(abc.ABC):
    """Builds replay tables, adders, actors, learners and policies for one agent from its
    config and `exploration`, the behaviour policy's head (conf/policy). Replay tables are prioritized
    where `config.prioritized`; the learner gets `Transition`s or `SequenceStep`s."""

    # The actions it acts in ("discrete", "continuous", None: either), checked before a run.
    action_kind: str | None = "discrete"
    # What the network factory must build (network factories carry the same attribute).
    network_kind: NetworkKind = NetworkKind.Q_VALUES
    # The compiled system launcher=anakin and sebulba run it under (rl/systems/); None: launcher=local and ray only.
    compiled_system: ClassVar[type[System] | None] = None
    # What replay holds (rl/replay/kinds.py): n-step transitions, sequences with `extras_spec`, or a queue of them.
    replay_kind: type[ReplayKind] = Transitions
    default_exploration: Callable[[], Any] = EpsilonGreedy
    actor_class: type = FeedForwardActor

    def __init__(self, config: Any, exploration: Any = None):
        self.config = config
        self.exploration = self.default_exploration() if exploration is None else exploration
        self.replay = self.replay_kind(config)

    def network_outputs(self) -> dict[str, Any]:
        """Network factory keyword arguments beyond the kind's default (e.g. `outputs_per_action`)."""
        return {}

    @abc.abstractmethod
    def make_policy(self, networks: Any, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """The behaviour policy, or with `evaluation=True` the policy to evaluate."""

    @abc.abstractmethod
    def make_learning(self, networks: Any) -> Learning: ...

    def compiled_agent(self, networks: Any, environment_spec: EnvironmentSpec) -> CompiledAgent:
        """What `compiled_system` asks of this agent: its config, learning and both policies."""
        behaviour = self.make_policy(networks, environment_spec, evaluation=False)
        evaluation = self.make_policy(networks, environment_spec, evaluation=True)
        return CompiledAgent(self.config, self.make_learning(networks), behaviour, evaluation)

    def make_actor_policy(self, networks: Any, environment_spec: EnvironmentSpec, actor_id: int) -> Policy:
        """Actor `actor_id`'s behaviour policy (R2D2 gives each actor its own)."""
        return self.make_policy(networks, environment_spec, evaluation=False)

    def make_actor(
        self,
        random_key: jax.Array,
        policy: Policy,
        environment_spec: EnvironmentSpec,
        variable_source: core.VariableSource,
        adder: Any = None,
    ) -> core.Actor:
        """An actor acting with `policy` on parameters pulled from `variable_source`."""
        client = VariableClient(variable_source, "policy", self.config.variable_update_period)
        dtype = np.int32 if is_discrete(environment_spec.actions) else np.float32
        return self.actor_class(policy, random_key, client, adder, action_dtype=dtype)

    def extras_spec(self, environment_spec: EnvironmentSpec) -> dict[str, Any]:
        """What each stored row of a sequence carries besides the step."""
        return {}

    @property
    def replay_ratio(self) -> Any:
        """The `ReplayRatio` (`QueueRatio`) of the table the learner samples (for single-process runs)."""
        return self.replay.ratio

    @property
    def samples_per_learner_step(self) -> int:
        """Items one `learner.step()` consumes."""
        return self.replay.samples_per_learner_step

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        return [self.replay.table(environment_spec, self.extras_spec(environment_spec))]

    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        return self.replay.adder(replay_client, environment_spec, self.extras_spec(environment_spec))

    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        return self.replay.iterator(replay_client, environment_spec)
