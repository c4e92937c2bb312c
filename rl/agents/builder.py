"""What every agent provides so experiments can build its nodes without knowing it."""

from __future__ import annotations

import abc
from typing import Any, Callable, Iterator

import jax
import numpy as np

from rl import core
from rl.agents.actors import FeedForwardActor, Policy
from rl.agents.learning import Learning, SGDLearner
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.policies import EpsilonGreedy
from rl.specs import EnvironmentSpec, is_discrete
from rl.variables import VariableClient


class ActorLearnerBuilder(abc.ABC):
    """Builds replay tables, adders, actors, learners and policies for one agent from its
    config and `exploration`, the behaviour policy's head (conf/policy)."""

    # The actions it acts in ("discrete", "continuous", None: either): configuration
    # checks refuse an environment the agent cannot act in before anything starts.
    action_kind: str | None = "discrete"
    # What the network factory must build (network factories carry the same attribute).
    network_kind: str = "q_values"
    # How launcher=anakin compiles the agent: "off_policy" (n-step transitions replayed
    # inside the program, rl/anakin/system.py OffPolicySystem), "on_policy" (rollouts, PPOSystem)
    # or None (it does not).
    anakin: str | None = None
    # The head behaviour policies use when none is given.
    default_exploration: Callable[[], Any] = EpsilonGreedy
    actor_class: type = FeedForwardActor

    def __init__(self, config: Any, exploration: Any = None):
        self.config = config
        self.exploration = self.default_exploration() if exploration is None else exploration

    def network_outputs(self) -> dict[str, Any]:
        """What the network must output beyond the kind's default, as keyword arguments of
        the network factory (e.g. `outputs_per_action` for a distributional head)."""
        return {}

    @abc.abstractmethod
    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        """The reverb tables this agent writes to and samples from."""

    @abc.abstractmethod
    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        """The adder an actor writes experience with (laid out as the tables expect)."""

    @abc.abstractmethod
    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        """Batches for the learner, read from replay."""

    @abc.abstractmethod
    def make_policy(self, networks: Any, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """The behaviour policy, or with `evaluation=True` the policy to evaluate."""

    def make_actor_policy(self, networks: Any, environment_spec: EnvironmentSpec, actor_id: int) -> Policy:
        """Actor `actor_id`'s behaviour policy (the same for every actor unless the agent
        gives each its own, as R2D2's Ape-X epsilons)."""
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

    @abc.abstractmethod
    def make_learning(self, networks: Any) -> Learning:
        """The agent's `Learning` (rl/agents/learning.py)."""

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
        return SGDLearner(self.make_learning(networks), random_key, dataset, replay_client, counter, logger)

    @property
    @abc.abstractmethod
    def replay_ratio(self) -> Any:
        """The `ReplayRatio` of the table the learner samples (for single-process runs)."""

    @property
    @abc.abstractmethod
    def samples_per_learner_step(self) -> int:
        """Items one `learner.step()` consumes."""


class TransitionReplayBuilder(ActorLearnerBuilder):
    """Replay, adder and dataset for agents learning from n-step transitions; their config
    is a `ReplayConfig` (optionally with `prioritized` and `priority_exponent`). Reverb is
    imported only when replay is built."""

    @property
    def replay_ratio(self) -> Any:
        from rl.replay.tables import ReplayRatio, make_error_buffer

        error_buffer = make_error_buffer(self.config.samples_per_insert, self.samples_per_learner_step)
        return ReplayRatio(self.config.samples_per_insert, self.config.min_replay_size, error_buffer)

    @property
    def samples_per_learner_step(self) -> int:
        return self.config.batch_size * self.config.sgd_steps_per_learner_step

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        from rl.replay.tables import make_transition_table

        return [
            make_transition_table(
                self.config.replay_table_name,
                environment_spec,
                max_size=self.config.max_replay_size,
                rate_limiter=self.replay_ratio.make_rate_limiter(),
                prioritized=getattr(self.config, "prioritized", False),
                priority_exponent=getattr(self.config, "priority_exponent", 0.6),
            )
        ]

    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        from rl.replay.adders import NStepTransitionAdder
        from rl.replay.codecs import transition_codec

        codec = transition_codec(environment_spec)
        return NStepTransitionAdder(
            replay_client, self.config.replay_table_name, self.config.n_step, self.config.discount, codec=codec
        )

    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        from rl.replay.codecs import transition_codec
        from rl.replay.seeded import learner_iterator

        decode = transition_codec(environment_spec).decode
        return learner_iterator(replay_client, self.config.replay_table_name, self.samples_per_learner_step, decode)


class SequenceReplayBuilder(ActorLearnerBuilder):
    """Adder and dataset for agents whose replay holds sequences of `config.sequence_length`
    rows, a new one every `config.sequence_period` rows of each environment copy, each
    row with the actor's `extras_spec`; the learner gets batch-major `SequenceStep`s."""

    @abc.abstractmethod
    def extras_spec(self, environment_spec: EnvironmentSpec) -> dict[str, Any]:
        """What each stored row carries besides the step."""

    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        from rl.replay.sequences import SequenceAdder, step_spec

        return SequenceAdder(
            replay_client,
            self.config.replay_table_name,
            step_spec(environment_spec, self.extras_spec(environment_spec)),
            sequence_length=self.config.sequence_length,
            period=self.config.sequence_period,
        )

    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        from rl.replay.seeded import learner_iterator
        from rl.replay.sequences import decode_sequences

        table, batch_size = self.config.replay_table_name, self.samples_per_learner_step
        return learner_iterator(replay_client, table, batch_size, decode=decode_sequences)
