"""Soft Actor-Critic: twin critics, tanh-Gaussian policy, automatic entropy temperature."""

from rl.agents.lazy import lazy_attributes
from rl.agents.sac.builder import SACBuilder, make_builder
from rl.agents.sac.config import SACConfig

__getattr__ = lazy_attributes(
    __name__,
    {
        "SACLearner": "learning",
        "TrainingState": "learning",
        "make_sac": "learning",
        "critic_loss": "losses",
        "policy_loss": "losses",
        "temperature_loss": "losses",
    },
)

__all__ = [
    "SACBuilder",
    "SACConfig",
    "SACLearner",
    "TrainingState",
    "critic_loss",
    "make_builder",
    "make_sac",
    "policy_loss",
    "temperature_loss",
]
