"""Builds DQN's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import jax

from rl.agents.actors import Policy, with_exploration
from rl.agents.builder import TransitionReplayBuilder, builder_factory
from rl.agents.dqn.config import DQNConfig
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.base import FeedForwardNetwork
from rl.policies import EpsilonGreedy, Greedy
from rl.specs import EnvironmentSpec

if TYPE_CHECKING:
    from rl.agents.dqn.learning import DQNLearner


class DQNBuilder(TransitionReplayBuilder):
    action_kind = "discrete"
    action_dtype = "int32"

    def __init__(self, config: DQNConfig, exploration: Any = None):
        super().__init__(config, exploration if exploration is not None else EpsilonGreedy())

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        del environment_spec
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            return head(networks.apply(params, observations), key, step)

        return with_exploration(policy, head)

    def make_learner(
        self,
        random_key: jax.Array,
        networks: FeedForwardNetwork,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> "DQNLearner":
        from rl.agents.dqn.learning import DQNLearner  # Loaded when first used: see rl/agents/lazy.py.

        return DQNLearner(networks, random_key, dataset, self.config, replay_client, counter, logger)


make_builder = builder_factory(DQNBuilder, DQNConfig)
