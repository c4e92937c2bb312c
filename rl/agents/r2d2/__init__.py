"""R2D2: recurrent Q-learning from prioritized sequence replay with stored LSTM states and
burn-in (Kapturowski et al., 2019)."""

from rl.agents.lazy import lazy_attributes
from rl.agents.r2d2.builder import R2D2Builder, make_builder
from rl.agents.r2d2.config import R2D2Config

# The learner and losses (rlax, and through it TensorFlow) load when first used.
__getattr__ = lazy_attributes(__name__, {"R2D2Learner": "learning", "TrainingState": "learning", "r2d2_loss": "losses"})

__all__ = ["R2D2Builder", "R2D2Config", "R2D2Learner", "TrainingState", "make_builder", "r2d2_loss"]
