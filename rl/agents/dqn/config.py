"""DQN hyperparameters: everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import ReplayConfig, check_learning_rate_decay
from rl.checks import require_positive


@dataclasses.dataclass
class DQNConfig(ReplayConfig):
    n_step: int = 3
    batch_size: int = 128
    samples_per_insert: float = 64.0
    max_replay_size: int = 100_000
    replay_table_name: str = "priority_table"
    prioritized: bool = False
    priority_exponent: float = 0.6
    importance_sampling_exponent: float = 0.4

    learning_rate: float = 5e-4
    # Decay ("linear" or "cosine", rl/agents/q_learning.py) to final_learning_rate_fraction
    # of the rate by this actor step (0: constant; conf/agent/dqn.yaml: max_actor_steps).
    learning_rate_decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 0.0
    learning_rate_decay: str = "linear"
    adam_eps: float = 1e-8
    max_gradient_norm: float = 10.0
    # In SGD steps, as every count of learner updates.
    target_update_period: int = 250
    huber_loss_delta: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "learning_rate", "target_update_period", "huber_loss_delta", "max_gradient_norm")
        check_learning_rate_decay(self)

    def sgd_steps_by(self, actor_steps: int) -> int:
        """SGD steps the replay ratio allows by `actor_steps` (one item per step): none before
        `min_replay_size` items, then `samples_per_insert / batch_size` per item."""
        return max(0, round((actor_steps - self.min_replay_size) * self.samples_per_insert / self.batch_size))
