"""IMPALA: an actor-critic learning from a queue of sequences that asynchronous actors
fill, off-policy corrected by V-trace (Espeholt et al., 2018)."""

from rl.agents.impala.builder import IMPALABuilder, make_builder
from rl.agents.impala.config import IMPALAConfig

__all__ = ["IMPALABuilder", "IMPALAConfig", "make_builder"]
