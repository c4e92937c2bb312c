"""Proximal Policy Optimisation: clipped surrogate, GAE, entropy bonus, from a reverb queue
of sequences."""

from typing import Any

from rl.agents.ppo.builder import PPOBuilder, make_builder
from rl.agents.ppo.config import PPOConfig

# The learner (rlax, and through it TensorFlow Probability) loads when first used, so
# configuration checks that only read the builder answer fast.
_LAZY = {"PPOLearner": "learning", "TrainingState": "learning", "PolicyParams": "learning"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = ["PPOBuilder", "PPOConfig", "PPOLearner", "PolicyParams", "TrainingState", "make_builder"]
