"""IMPALA: an actor-critic learning from a queue of sequences that asynchronous actors
fill, off-policy corrected by V-trace (Espeholt et al., 2018)."""

from rl.agents.impala.builder import IMPALABuilder, make_builder
from rl.agents.impala.config import IMPALAConfig
from rl.agents.lazy import lazy_attributes

# The learner and losses (rlax, and through it TensorFlow) load when first used, so
# configuration checks that only read the builder answer fast.
__getattr__ = lazy_attributes(__name__, {"IMPALALearner": "learning", "TrainingState": "learning"})

__all__ = ["IMPALABuilder", "IMPALAConfig", "IMPALALearner", "TrainingState", "make_builder"]
