"""Deep Q-Networks: double DQN with n-step returns, target network and optional PER."""

from rl.agents.configs import builder_factory
from rl.agents.dqn.config import DQNConfig

make_builder = builder_factory("rl.agents.dqn.builder:DQNBuilder", DQNConfig)
