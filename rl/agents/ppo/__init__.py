"""Proximal Policy Optimisation: clipped surrogate, GAE, entropy bonus, from a reverb queue
of sequences."""

from rl.agents.ppo.builder import PPOBuilder, make_builder
from rl.agents.ppo.config import PPOConfig

__all__ = ["PPOBuilder", "PPOConfig", "make_builder"]
