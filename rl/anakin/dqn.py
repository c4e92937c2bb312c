"""DQN's learner as pure functions for launcher=anakin (rl/anakin/off_policy.py acts and
replays, with the builder's epsilon-greedy and greedy policies): the reverb DQN's own
SGD step (rl/agents/dqn/learning.py `dqn_sgd_step`: `double_q_loss`, optimiser, target
updates)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rl.agents.dqn.builder import DQNBuilder
from rl.agents.dqn.learning import dqn_sgd_step
from rl.agents.q_learning import TrainingState, initial_state, make_optimizer
from rl.networks.base import FeedForwardNetwork
from rl.types import Transition


class DQNFunctions:
    """DQNLearner's state and SGD step as pure functions (uniform replay)."""

    def __init__(self, builder: DQNBuilder, network: FeedForwardNetwork):
        self.config = builder.config
        self.network = network
        self.optimizer = make_optimizer(self.config)

    def init(self, key: jax.Array) -> TrainingState:
        return initial_state(self.network.init(key), self.optimizer)

    def sgd_step(self, state: TrainingState, transitions: Transition) -> tuple[TrainingState, dict]:
        """The reverb DQN learner's SGD step (uniform replay: every weight 1)."""
        weights = jnp.ones_like(transitions.reward)
        state, metrics, _ = dqn_sgd_step(
            self.network.apply, self.optimizer, self.config, state, (transitions, weights, jnp.zeros((), jnp.int32))
        )
        return state, metrics

    def policy_params(self, state: TrainingState) -> Any:
        return state.params

    def learner_steps(self, state: TrainingState) -> jax.Array:
        return state.steps
