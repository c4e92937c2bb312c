"""Where `ExtrasActor` used to live: it moved to rl/agents/actors.py, shared by PPO and
IMPALA; this name is kept for imports of the old path."""

from rl.agents.actors import ExtrasActor

__all__ = ["ExtrasActor"]
