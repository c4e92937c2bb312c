"""DQN as an anakin system: the off-policy acting and replay of rl/anakin/off_policy.py
with the reverb DQN's own SGD step (rl/agents/dqn/learning.py: `double_q_loss`,
optimiser, target updates) and its epsilon-greedy and greedy policies."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rl.agents.dqn.builder import DQNBuilder
from rl.agents.dqn.learning import DQNLearner, TrainingState, make_optimizer
from rl.anakin.off_policy import OffPolicySystem
from rl.environments.gymnax_vector import GymnaxVector
from rl.networks.base import FeedForwardNetwork
from rl.specs import EnvironmentSpec
from rl.types import Transition


class DQNFunctions:
    """DQNLearner's state and SGD step as pure functions (uniform replay)."""

    def __init__(self, builder: DQNBuilder, network: FeedForwardNetwork):
        self.config = builder.config
        self.network = network
        self.optimizer = make_optimizer(self.config)

    def init(self, key: jax.Array) -> TrainingState:
        params = self.network.init(key)
        return TrainingState(params, params, self.optimizer.init(params), jnp.zeros((), jnp.int32))

    def sgd_step(self, state: TrainingState, transitions: Transition) -> tuple[TrainingState, dict]:
        """The reverb DQN learner's SGD step (uniform replay: every weight 1)."""
        weights = jnp.ones_like(transitions.reward)
        state, metrics, _ = DQNLearner._sgd_step(
            self.network.apply, self.optimizer, self.config, state, (transitions, weights, jnp.zeros((), jnp.int32))
        )
        return state, metrics

    def policy_params(self, state: TrainingState) -> Any:
        return state.params

    def learner_steps(self, state: TrainingState) -> jax.Array:
        return state.steps


def make_dqn_system(
    builder: DQNBuilder,
    network: FeedForwardNetwork,
    environment: GymnaxVector,
    environment_spec: EnvironmentSpec,
    max_actor_steps: int,
) -> OffPolicySystem:
    return OffPolicySystem(
        DQNFunctions(builder, network),
        builder.config,
        builder.make_policy(network, environment_spec, evaluation=False),
        builder.make_policy(network, environment_spec, evaluation=True),
        environment,
        environment_spec,
        max_actor_steps,
    )
