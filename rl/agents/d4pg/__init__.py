"""D4PG: deterministic policy, categorical critic on projected n-step Bellman targets."""

from rl.agents.configs import builder_factory
from rl.agents.d4pg.config import D4PGConfig

make_builder = builder_factory("rl.agents.d4pg.builder:D4PGBuilder", D4PGConfig)
