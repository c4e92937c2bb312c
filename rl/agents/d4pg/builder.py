"""Builds D4PG's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any, Iterator

import jax

from rl.agents.continuous import ContinuousBuilder
from rl.agents.d4pg.config import D4PGConfig
from rl.agents.d4pg.learning import D4PGLearner
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.actor_critic import ActorCriticNetworks
from rl.policies import GaussianNoise


class D4PGBuilder(ContinuousBuilder):
    def __init__(self, config: D4PGConfig, exploration: Any = None):
        super().__init__(config, exploration)

    def default_exploration(self) -> Any:
        return GaussianNoise(sigma=0.3)

    def make_learner(
        self,
        random_key: jax.Array,
        networks: ActorCriticNetworks,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> D4PGLearner:
        del replay_client
        return D4PGLearner(networks, random_key, dataset, self.config, counter, logger)


def make_builder(exploration: Any = None, **config: Any) -> D4PGBuilder:
    """The factory conf/agent/d4pg.yaml names: agent keys become `D4PGConfig` fields."""
    return D4PGBuilder(D4PGConfig(**config), exploration=exploration)


make_builder.config_class = D4PGConfig  # Lets configuration checks read the agent's keys.
