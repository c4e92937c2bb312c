"""TD3: twin critics, target policy smoothing and delayed policy updates."""

from rl.agents.td3.builder import TD3Builder, make_builder
from rl.agents.td3.config import TD3Config
from rl.agents.td3.learning import TD3Learner, TrainingState
from rl.agents.td3.losses import critic_loss, policy_loss, smoothed_target_action

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
