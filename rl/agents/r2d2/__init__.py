"""R2D2: recurrent Q-learning from prioritized sequence replay with stored LSTM states and
burn-in (Kapturowski et al., 2019)."""

from rl.agents.configs import builder_factory
from rl.agents.r2d2.config import R2D2Config

make_builder = builder_factory("rl.agents.r2d2.builder:R2D2Builder", R2D2Config)
