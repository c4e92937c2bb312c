"""TD3: twin critics, target policy smoothing and delayed policy updates."""

from rl.agents.lazy import lazy_attributes
from rl.agents.td3.builder import TD3Builder, make_builder
from rl.agents.td3.config import TD3Config

__getattr__ = lazy_attributes(
    __name__,
    {
        "TD3Learner": "learning",
        "TrainingState": "learning",
        "critic_loss": "losses",
        "policy_loss": "losses",
        "smoothed_target_action": "losses",
    },
)

__all__ = [
    "TD3Builder",
    "TD3Config",
    "TD3Learner",
    "TrainingState",
    "critic_loss",
    "make_builder",
    "policy_loss",
    "smoothed_target_action",
]
