"""Builds PPO's queue, sequence adder, actor, learner and policies (all but the learner
are the on-policy agents' shared ones, rl/agents/on_policy.py)."""

from __future__ import annotations

from typing import Any, Iterator

import jax

from rl import core
from rl.agents.builder import builder_factory
from rl.agents.on_policy import SequenceQueueBuilder
from rl.agents.ppo.config import PPOConfig
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.base import FeedForwardNetwork


class PPOBuilder(SequenceQueueBuilder):
    """PPO from a queue of sequences: each learner step trains on `batch_size` sequences
    for `num_epochs` passes of `num_minibatches` minibatches."""

    agent_name = "ppo"

    def make_learner(
        self,
        random_key: jax.Array,
        networks: FeedForwardNetwork,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> core.Learner:
        from rl.agents.ppo.learning import PPOLearner

        del replay_client  # A queue: nothing to write back.
        if self.config.normalize_observations and getattr(networks, "observation_spec", None) is None:
            raise ValueError(
                "normalize_observations needs a network that names its observation spec (policy_value_mlp)"
            )
        return PPOLearner(networks, random_key, dataset, self.config, networks.observation_spec, counter, logger)


make_builder = builder_factory(PPOBuilder, PPOConfig)
