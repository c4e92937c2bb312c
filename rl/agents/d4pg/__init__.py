"""D4PG: deterministic policy, categorical critic on projected n-step Bellman targets."""

from rl.agents.d4pg.builder import D4PGBuilder, make_builder
from rl.agents.d4pg.config import D4PGConfig
from rl.agents.d4pg.learning import D4PGLearner, TrainingState, support
from rl.agents.d4pg.losses import critic_loss, policy_loss, projected_target

__all__ = [
    "D4PGBuilder",
    "D4PGConfig",
    "D4PGLearner",
    "TrainingState",
    "critic_loss",
    "make_builder",
    "policy_loss",
    "projected_target",
    "support",
]
