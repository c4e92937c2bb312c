"""Deep Q-Networks: double DQN with n-step returns, target network and optional PER;
`DQNConfig` holds everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import QLearningConfig, builder_factory
from rl.checks import require_positive


@dataclasses.dataclass
class DQNConfig(QLearningConfig):
    n_step: int = 3
    batch_size: int = 128
    samples_per_insert: float = 64.0
    max_replay_size: int = 100_000
    replay_table_name: str = "priority_table"
    huber_loss_delta: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "huber_loss_delta")

    def sgd_steps_by(self, actor_steps: int) -> int:
        """SGD steps the replay ratio allows by `actor_steps` (one item per step)."""
        return max(0, round((actor_steps - self.min_replay_size) * self.samples_per_insert / self.batch_size))


make_builder = builder_factory("rl.agents.dqn.builder:DQNBuilder", DQNConfig)
