"""Builds SAC's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any, Iterator

import jax

from rl.agents.continuous import ContinuousBuilder
from rl.agents.sac.config import SACConfig
from rl.agents.sac.learning import SACLearner
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.actor_critic import ActorCriticNetworks
from rl.policies import Stochastic


class SACBuilder(ContinuousBuilder):
    stochastic_policy = True

    def __init__(self, config: SACConfig, exploration: Any = None):
        super().__init__(config, exploration)

    def default_exploration(self) -> Any:
        return Stochastic()

    def make_learner(
        self,
        random_key: jax.Array,
        networks: ActorCriticNetworks,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> SACLearner:
        del replay_client
        return SACLearner(networks, random_key, dataset, self.config, counter, logger)


def make_builder(exploration: Any = None, **config: Any) -> SACBuilder:
    """The factory conf/agent/sac.yaml names: agent keys become `SACConfig` fields."""
    return SACBuilder(SACConfig(**config), exploration=exploration)


make_builder.config_class = SACConfig  # Lets configuration checks read the agent's keys.
