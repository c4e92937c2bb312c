"""Proximal Policy Optimisation: clipped surrogate, GAE, entropy bonus, from a reverb queue
of sequences."""

from rl.agents.lazy import lazy_attributes
from rl.agents.ppo.builder import PPOBuilder, make_builder
from rl.agents.ppo.config import PPOConfig

# The learner (JAX, optax, haiku) loads when first used, so
# configuration checks that only read the builder answer fast.
__getattr__ = lazy_attributes(
    __name__, {"PPOLearner": "learning", "TrainingState": "learning", "PolicyParams": "learning"}
)

__all__ = ["PPOBuilder", "PPOConfig", "PPOLearner", "PolicyParams", "TrainingState", "make_builder"]
