"""Builds DQN's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any

import jax

from rl.agents.actors import Policy, with_exploration
from rl.agents.builder import TransitionReplayBuilder
from rl.agents.dqn.config import DQNConfig
from rl.networks.base import FeedForwardNetwork
from rl.policies import EpsilonGreedy, Greedy
from rl.specs import EnvironmentSpec


class DQNBuilder(TransitionReplayBuilder):
    action_kind = "discrete"
    action_dtype = "int32"
    anakin = "off_policy"

    def __init__(self, config: DQNConfig, exploration: Any = None):
        super().__init__(config, exploration if exploration is not None else EpsilonGreedy())

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        del environment_spec
        head = Greedy() if evaluation else self.exploration

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> jax.Array:
            return head(networks.apply(params, observations), key, step)

        return with_exploration(policy, head)

    def make_learning(self, networks: FeedForwardNetwork) -> Any:
        from rl.agents.dqn.learning import (
            make_learning,
        )  # Loaded when the learner is built: configuration checks stay fast.

        return make_learning(networks, self.config)
