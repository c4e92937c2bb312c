"""DQN hyperparameters: everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.builder import ReplayConfig
from rl.agents.q_learning import check_learning_rate_decay
from rl.checks import require_positive


@dataclasses.dataclass
class DQNConfig(ReplayConfig):
    # The replay section (rl/agents/builder.py), with DQN's defaults.
    n_step: int = 3
    batch_size: int = 64
    # Items sampled per item inserted: batch_size / samples_per_insert actor steps per update.
    samples_per_insert: float = 64.0
    max_replay_size: int = 100_000
    replay_table_name: str = "priority_table"
    prioritized: bool = False
    priority_exponent: float = 0.6
    importance_sampling_exponent: float = 0.4

    learning_rate: float = 1e-3
    # Anneal the learning rate linearly to `final_learning_rate_fraction` of its value by
    # this actor step (0 keeps it constant). conf/agent/dqn.yaml sets it to the run's
    # `max_actor_steps`, so the schedule spans every run whatever its length.
    learning_rate_decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 0.0
    # The decay's shape: "linear" or "cosine" (rl/agents/q_learning.py states both).
    learning_rate_decay: str = "linear"
    adam_eps: float = 1e-8
    max_gradient_norm: float = 10.0
    # Counted in SGD steps (not actor steps): the target copy happens every this many updates.
    target_update_period: int = 500
    huber_loss_delta: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "learning_rate", "target_update_period", "huber_loss_delta", "max_gradient_norm")
        check_learning_rate_decay(self)
        if self.learning_rate_decay_actor_steps < 0:
            raise ValueError(
                f"learning_rate_decay_actor_steps must be >= 0, got {self.learning_rate_decay_actor_steps}"
            )
        if not 0.0 <= self.final_learning_rate_fraction <= 1.0:
            raise ValueError(f"final_learning_rate_fraction must be in [0, 1], got {self.final_learning_rate_fraction}")

    def sgd_steps_by(self, actor_steps: int) -> int:
        """SGD steps the replay ratio allows once `actor_steps` transitions are inserted.

        Sampling starts at `min_replay_size` items; after that every inserted item buys
        `samples_per_insert / batch_size` SGD steps (one item per actor step).
        """
        return max(0, round((actor_steps - self.min_replay_size) * self.samples_per_insert / self.batch_size))
