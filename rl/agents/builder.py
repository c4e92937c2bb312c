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
    # How launcher=anakin compiles the agent: "off_policy" (n-step transitions replayed
    # from a buffer inside the program, rl/anakin/off_policy.py), "on_policy" (rollouts,
    # rl/anakin/ppo.py) or None (it does not).
    anakin: str | None = None

    def network_outputs(self) -> dict[str, Any]:
        """What the agent's network must output beyond the kind's default, as keyword
        arguments of the network factory (e.g. `outputs_per_action` for a distributional
        head); none by default."""
        return {}

    @abc.abstractmethod
    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        """The reverb tables this agent writes to and samples from."""

    @abc.abstractmethod
    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        """The adder an actor uses to write experience (laid out as the tables expect)."""

    @abc.abstractmethod
    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        """Batches for the learner, read from replay."""

    @abc.abstractmethod
    def make_policy(self, networks: Any, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """The behaviour policy, or with `evaluation=True` the policy to evaluate."""

    def make_actor_policy(self, networks: Any, environment_spec: EnvironmentSpec, actor_id: int) -> Policy:
        """Actor `actor_id`'s behaviour policy: the same for every actor unless an agent
        gives each its own (R2D2's Ape-X epsilons)."""
        return self.make_policy(networks, environment_spec, evaluation=False)

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
    def make_learning(self, networks: Any) -> Any:
        """The agent's `Learning`: its training state, SGD step and policy parameters as
        pure functions (rl/agents/learning.py)."""

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
        from rl.agents.learning import SGDLearner

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
    """Replay, adder, dataset and actor for agents learning from n-step transitions.

    Subclasses provide `make_policy` and `make_learner`; their config is a `ReplayConfig`
    (optionally with `prioritized` and `priority_exponent`). Reverb is imported only when
    replay is built.
    """

    # The dtype actors hand to the environment and to replay.
    action_dtype: Any = "int32"

    def __init__(self, config: Any, exploration: Any):
        self.config = config
        self.exploration = exploration

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

        return NStepTransitionAdder(
            replay_client,
            self.config.replay_table_name,
            self.config.n_step,
            self.config.discount,
            codec=transition_codec(environment_spec),
        )

    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        from rl.replay.codecs import transition_codec
        from rl.replay.seeded import learner_iterator

        return learner_iterator(
            replay_client,
            self.config.replay_table_name,
            self.samples_per_learner_step,
            decode=transition_codec(environment_spec).decode,
        )

    def make_actor(
        self,
        random_key: jax.Array,
        policy: Policy,
        environment_spec: EnvironmentSpec,
        variable_source: core.VariableSource,
        adder: Any = None,
    ) -> core.Actor:
        from rl.variables import VariableClient

        del environment_spec
        client = VariableClient(variable_source, "policy", self.config.variable_update_period)
        return self.actor_class()(policy, random_key, client, adder, action_dtype=self.action_dtype)

    def actor_class(self) -> type:
        """The actor `make_actor` builds (imported when first asked for)."""
        from rl.agents.actors import FeedForwardActor

        return FeedForwardActor


def sequence_iterator(replay_client: Any, table_name: str, batch_size: int) -> Iterator[Any]:
    """Batches of `batch_size` stored sequences from `table_name`, decoded to batch-major
    `SequenceStep`s (for the builders whose replay holds sequences)."""
    from rl.replay.seeded import learner_iterator
    from rl.replay.sequences import decode_sequences

    return learner_iterator(replay_client, table_name, batch_size, decode=decode_sequences)
