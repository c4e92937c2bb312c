"""IMPALA: an actor-critic learning from a queue of sequences that asynchronous actors
fill, off-policy corrected by V-trace (Espeholt et al., 2018)."""

from rl.agents.configs import builder_factory
from rl.agents.impala.config import IMPALAConfig

make_builder = builder_factory("rl.agents.impala.builder:IMPALABuilder", IMPALAConfig)
