"""Soft Actor-Critic: twin critics, tanh-Gaussian policy, automatic entropy temperature."""

from rl.agents.sac.builder import SACBuilder, make_builder
from rl.agents.sac.config import SACConfig

__all__ = ["SACBuilder", "SACConfig", "make_builder"]
