"""SAC's learner as pure functions for launcher=anakin (rl/anakin/off_policy.py acts and
replays, with the builder's policies): the reverb SAC's own state and SGD step
(rl/agents/sac/learning.py `make_sac`: twin critics, tanh-Gaussian policy, learned
temperature).

Replay keeps environment-scale actions, as reverb does; like `ContinuousLearner`, the
SGD step sees them mapped back to [-1, 1]. `learner_steps` counts learner steps of
`sgd_steps_per_learner_step` SGD steps each, as the reverb learner does.
"""

from __future__ import annotations

from typing import Any

import jax

from rl.agents.continuous import to_network_scale
from rl.agents.sac.builder import SACBuilder
from rl.agents.sac.learning import TrainingState, make_sac
from rl.networks.actor_critic import ActorCriticNetworks
from rl.types import Transition


class SACFunctions:
    """SAC's state and SGD step on environment-scale replayed actions."""

    def __init__(self, builder: SACBuilder, networks: ActorCriticNetworks):
        self.sac = make_sac(networks, builder.config)
        self.action_spec = networks.environment_spec.actions
        self.sgd_steps_per_learner_step = builder.config.sgd_steps_per_learner_step

    def init(self, key: jax.Array) -> TrainingState:
        return self.sac.init(key)

    def sgd_step(self, state: TrainingState, transitions: Transition) -> tuple[TrainingState, dict]:
        return self.sac.sgd_step(
            state, transitions._replace(action=to_network_scale(transitions.action, self.action_spec))
        )

    def policy_params(self, state: TrainingState) -> Any:
        return state.policy_params

    def learner_steps(self, state: TrainingState) -> jax.Array:
        return state.steps // self.sgd_steps_per_learner_step
