"""Soft Actor-Critic: twin critics, tanh-Gaussian policy, automatic entropy temperature."""

from rl.agents.sac.builder import SACBuilder, make_builder
from rl.agents.sac.config import SACConfig
from rl.agents.sac.learning import SACLearner, TrainingState
from rl.agents.sac.losses import critic_loss, policy_loss, temperature_loss

__all__ = [
    "SACBuilder",
    "SACConfig",
    "SACLearner",
    "TrainingState",
    "critic_loss",
    "make_builder",
    "policy_loss",
    "temperature_loss",
]
