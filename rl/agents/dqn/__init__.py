"""Deep Q-Networks: double DQN with n-step returns, target network and optional PER."""

from rl.agents.dqn.builder import DQNBuilder, make_builder
from rl.agents.dqn.config import DQNConfig
from rl.agents.lazy import lazy_attributes

__getattr__ = lazy_attributes(
    __name__, {"DQNLearner": "learning", "TrainingState": "learning", "double_q_loss": "losses"}
)

__all__ = ["DQNBuilder", "DQNConfig", "DQNLearner", "TrainingState", "double_q_loss", "make_builder"]
