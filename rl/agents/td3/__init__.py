"""TD3: twin critics, target policy smoothing and delayed policy updates."""

from rl.agents.configs import builder_factory
from rl.agents.td3.config import TD3Config

make_builder = builder_factory("rl.agents.td3.builder:TD3Builder", TD3Config)
