"""Deep Q-Networks: double DQN with n-step returns, target network and optional PER."""

from rl.agents.dqn.builder import DQNBuilder, make_builder
from rl.agents.dqn.config import DQNConfig

__all__ = ["DQNBuilder", "DQNConfig", "make_builder"]
