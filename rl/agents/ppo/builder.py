"""Builds PPO's queue, sequence adder, actor, learner and policies (all but the learner
are the on-policy agents' shared ones, rl/agents/on_policy.py)."""

from __future__ import annotations

from typing import Any


from rl.agents.on_policy import SequenceQueueBuilder
from rl.networks.base import FeedForwardNetwork


class PPOBuilder(SequenceQueueBuilder):
    """PPO from a queue of sequences: each learner step trains on `batch_size` sequences
    for `num_epochs` passes of `num_minibatches` minibatches."""

    agent_name = "ppo"
    anakin = "on_policy"

    def make_learning(self, networks: FeedForwardNetwork) -> Any:
        from rl.agents.ppo.learning import make_learning

        if self.config.normalize_observations and getattr(networks, "observation_spec", None) is None:
            raise ValueError(
                "normalize_observations needs a network that names its observation spec (policy_value_mlp)"
            )
        return make_learning(networks, self.config)
