"""Builds IMPALA's queue, sequence adder, actor, learner and policies.

Everything but the learner is the on-policy agents' shared builder
(rl/agents/on_policy.py, as PPO's): a queue of `unroll_length + 1`-row sequences,
`SequenceAdder` storing the behaviour policy's log-probabilities as extras, `ExtrasActor`
and the sampling / mode policies. IMPALA differs in what the learner does with a batch:
one V-trace-corrected actor-critic SGD step (or `sgd_steps_per_learner_step` of them,
each on its own slice), each sequence trained on once.
"""

from __future__ import annotations

from typing import Any


from rl.agents.on_policy import SequenceQueueBuilder
from rl.networks.base import FeedForwardNetwork


class IMPALABuilder(SequenceQueueBuilder):
    """IMPALA from a bounded queue of sequences: actors insert without waiting for the
    learner until the queue holds `queue_size` items; the learner takes
    `batch_size * sgd_steps_per_learner_step` sequences per learner step."""

    agent_name = "impala"

    def make_learning(self, networks: FeedForwardNetwork) -> Any:
        from rl.agents.impala.learning import make_learning

        return make_learning(networks, self.config)
