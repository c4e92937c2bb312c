"""Builds TD3's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any, Iterator

import jax

from rl.agents.continuous import ContinuousBuilder
from rl.agents.td3.config import TD3Config
from rl.agents.td3.learning import TD3Learner
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.actor_critic import ActorCriticNetworks


class TD3Builder(ContinuousBuilder):
    def __init__(self, config: TD3Config, exploration: Any = None):
        super().__init__(config, exploration)

    def make_learner(
        self,
        random_key: jax.Array,
        networks: ActorCriticNetworks,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> TD3Learner:
        del replay_client
        return TD3Learner(networks, random_key, dataset, self.config, counter, logger)


def make_builder(exploration: Any = None, **config: Any) -> TD3Builder:
    """The factory conf/agent/td3.yaml names: agent keys become `TD3Config` fields."""
    return TD3Builder(TD3Config(**config), exploration=exploration)


make_builder.config_class = TD3Config  # Lets configuration checks read the agent's keys.
