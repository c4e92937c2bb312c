"""Soft Actor-Critic: twin critics, tanh-Gaussian policy, automatic entropy temperature."""

from rl.agents.configs import builder_factory
from rl.agents.sac.config import SACConfig

make_builder = builder_factory("rl.agents.sac.builder:SACBuilder", SACConfig)
