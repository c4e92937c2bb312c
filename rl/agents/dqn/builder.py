"""Builds DQN's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any, Iterator

import jax
import jax.numpy as jnp
import reverb

from rl import core
from rl.agents.actors import FeedForwardActor, Policy
from rl.agents.builder import ActorLearnerBuilder
from rl.agents.dqn.config import DQNConfig
from rl.agents.dqn.learning import DQNLearner
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.base import FeedForwardNetwork
from rl.policies import EpsilonGreedy, Greedy
from rl.replay.adders import NStepTransitionAdder
from rl.replay.dataset import make_replay_iterator
from rl.replay.tables import ReplayRatio, make_transition_table
from rl.specs import EnvironmentSpec
from rl.variables import VariableClient


class DQNBuilder(ActorLearnerBuilder):
    action_kind = "discrete"

    def __init__(self, config: DQNConfig, exploration: Any = None):
        self.config = config
        self.exploration = exploration if exploration is not None else EpsilonGreedy()

    @property
    def replay_ratio(self) -> ReplayRatio:
        # The buffer must hold at least one learner step of samples plus one insert's worth,
        # or inserts and samples could block each other.
        error_buffer = 2.0 * max(self.samples_per_learner_step, self.config.samples_per_insert)
        return ReplayRatio(self.config.samples_per_insert, self.config.min_replay_size, error_buffer)

    @property
    def samples_per_learner_step(self) -> int:
        return self.config.batch_size * self.config.sgd_steps_per_learner_step

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[reverb.Table]:
        return [
            make_transition_table(
                self.config.replay_table_name,
                environment_spec,
                max_size=self.config.max_replay_size,
                rate_limiter=self.replay_ratio.make_rate_limiter(),
                prioritized=self.config.prioritized,
                priority_exponent=self.config.priority_exponent,
            )
        ]

    def make_adder(self, replay_client: reverb.Client) -> NStepTransitionAdder:
        return NStepTransitionAdder(
            replay_client, self.config.replay_table_name, self.config.n_step, self.config.discount
        )

    def make_dataset_iterator(self, replay_client: reverb.Client) -> Iterator[Any]:
        return make_replay_iterator(
            replay_client.server_address, self.config.replay_table_name, self.samples_per_learner_step
        )

    def make_policy(
        self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool
    ) -> Policy:
        del environment_spec
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observation: Any, step: jax.Array) -> jax.Array:
            batched = jax.tree_util.tree_map(lambda x: jnp.expand_dims(x, 0), observation)
            return head(networks.apply(params, batched)[0], key, step)

        return policy

    def make_actor(
        self,
        random_key: jax.Array,
        policy: Policy,
        environment_spec: EnvironmentSpec,
        variable_source: core.VariableSource,
        adder: Any = None,
    ) -> FeedForwardActor:
        del environment_spec
        client = VariableClient(variable_source, "policy", self.config.variable_update_period)
        return FeedForwardActor(policy, random_key, client, adder, action_dtype="int32")

    def make_learner(
        self,
        random_key: jax.Array,
        networks: FeedForwardNetwork,
        dataset: Iterator[Any],
        replay_client: reverb.Client,
        counter: Counter,
        logger: Logger,
    ) -> DQNLearner:
        return DQNLearner(networks, random_key, dataset, self.config, replay_client, counter, logger)


def make_builder(exploration: Any = None, **config: Any) -> DQNBuilder:
    """The factory conf/agent/dqn.yaml names: agent keys become `DQNConfig` fields."""
    return DQNBuilder(DQNConfig(**config), exploration=exploration)


make_builder.config_class = DQNConfig  # Lets configuration checks read the agent's keys.
