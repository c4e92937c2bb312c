"""Deep Q-Networks: double DQN with n-step returns, target network and optional PER."""

from rl.agents.dqn.builder import DQNBuilder, make_builder
from rl.agents.dqn.config import DQNConfig
from rl.agents.dqn.learning import DQNLearner, TrainingState
from rl.agents.dqn.losses import double_q_loss

__all__ = ["DQNBuilder", "DQNConfig", "DQNLearner", "TrainingState", "double_q_loss", "make_builder"]
