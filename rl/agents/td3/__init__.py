"""TD3: twin critics, target policy smoothing and delayed policy updates."""

from rl.agents.td3.builder import TD3Builder, make_builder
from rl.agents.td3.config import TD3Config

__all__ = ["TD3Builder", "TD3Config", "make_builder"]
