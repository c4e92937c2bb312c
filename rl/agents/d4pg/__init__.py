"""D4PG: deterministic policy, categorical critic on projected n-step Bellman targets."""

from rl.agents.d4pg.builder import D4PGBuilder, make_builder
from rl.agents.d4pg.config import D4PGConfig
from rl.agents.lazy import lazy_attributes

__getattr__ = lazy_attributes(
    __name__,
    {
        "D4PGLearner": "learning",
        "TrainingState": "learning",
        "support": "learning",
        "critic_loss": "losses",
        "policy_loss": "losses",
        "projected_target": "losses",
    },
)

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
