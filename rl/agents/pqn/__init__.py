"""Parallelised Q-Network (PQN; Gallici et al., 2025): Q(lambda) targets over rollouts of many environment
copies, a layer-normalised Q-network, epsilon-greedy acting, no replay buffer and no target network;
`PQNConfig` holds everything `agent.*` can override."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from rl.agents.configs import SequenceQueueConfig, builder_factory
from rl.checks import require_positive, require_unit_interval


@dataclasses.dataclass
class PQNConfig(SequenceQueueConfig):
    # A learner step trains on batch_size rollouts of unroll_length steps (under launcher=anakin, batch_size / num_envs
    # consecutive rollouts of each copy).
    unroll_length: int = 32
    replay_table_name: str = "pqn_queue"

    # Passes over each batch, each in num_minibatches shuffled minibatches (one lax.scan); the targets are
    # computed once per batch, before its first pass.
    num_epochs: int = 2
    num_minibatches: int = 4
    # lambda of the Q(lambda) targets: 0 is one-step Q-learning, 1 the Monte Carlo return.
    q_lambda: float = 0.65
    learning_rate: float = 5e-4
    # The learning rate decays linearly to this fraction of it over decay_actor_steps (the run, in conf/agent).
    final_learning_rate_fraction: float = 0.0
    max_gradient_norm: float = 10.0
    radam_eps: float = 1e-8

    # Read by launcher=anakin's OnPolicySystem; PQN acts on raw observations.
    normalize_observations: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "num_epochs", "num_minibatches", "radam_eps")
        require_unit_interval(self, "q_lambda")
        if (self.batch_size * self.unroll_length) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide the batch's "
                f"batch_size * unroll_length = {self.batch_size * self.unroll_length} steps"
            )


make_builder = builder_factory("rl.agents.pqn.builder:PQNBuilder", PQNConfig)
