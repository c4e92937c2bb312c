"""D4PG: deterministic policy, categorical critic on projected n-step Bellman targets."""

from rl.agents.d4pg.builder import D4PGBuilder, make_builder
from rl.agents.d4pg.config import D4PGConfig

__all__ = ["D4PGBuilder", "D4PGConfig", "make_builder"]
