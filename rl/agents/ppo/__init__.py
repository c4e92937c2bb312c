"""Proximal Policy Optimisation: clipped surrogate, GAE, entropy bonus, from a reverb queue
of sequences."""

from rl.agents.configs import builder_factory
from rl.agents.ppo.config import PPOConfig

make_builder = builder_factory("rl.agents.ppo.builder:PPOBuilder", PPOConfig)
