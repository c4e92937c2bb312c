"""R2D2: recurrent Q-learning from prioritized sequence replay with stored LSTM states and
burn-in (Kapturowski et al., 2019); `R2D2Config` holds everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import QLearningConfig, builder_factory
from rl.checks import require_non_negative, require_positive, require_unit_interval


@dataclasses.dataclass
class R2D2Config(QLearningConfig):
    # Items are burn_in_length + trace_length rows of one environment copy, a new one every
    # sequence_period rows (null: trace_length // 2); the trace's last row only bootstraps.
    # Counts below are items.
    burn_in_length: int = 8
    trace_length: int = 40
    sequence_period: int | None = None
    n_step: int = 5
    discount: float = 0.997
    batch_size: int = 32
    samples_per_insert: float = 4.0
    min_replay_size: int = 100
    max_replay_size: int = 10_000
    replay_table_name: str = "r2d2_table"
    # p_i = eta * max_t |td_t| + (1 - eta) * mean_t |td_t| over the item's trained rows.
    prioritized: bool = True
    priority_exponent: float = 0.9
    priority_eta: float = 0.9
    importance_sampling_exponent: float = 0.6
    # h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x on the n-step targets.
    value_rescaling: bool = True
    rescaling_epsilon: float = 1e-3
    learning_rate: float = 1e-4
    adam_eps: float = 1e-3
    max_gradient_norm: float = 40.0
    target_update_period: int = 2500
    # Units of the LSTM state stored with every step.
    core_state_size: int | None = None
    # Ape-X exploration with num_actors > 1: actor i of N acts with epsilon
    # actor_epsilon ** (1 + actor_epsilon_alpha * i / (N - 1)) instead of the policy group.
    per_actor_epsilon: bool = True
    actor_epsilon: float = 0.4
    actor_epsilon_alpha: float = 7.0
    num_actors: int = 1
    variable_update_period: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sequence_period is None:
            self.sequence_period = max(1, self.trace_length // 2)
        require_positive(self, "trace_length", "sequence_period", "adam_eps", "rescaling_epsilon", "num_actors")
        if self.trace_length < 2:
            raise ValueError(f"trace_length must be >= 2 (a trained row and its bootstrap), got {self.trace_length}")
        if self.sequence_period > self.trace_length - 1:
            raise ValueError(
                f"sequence_period ({self.sequence_period}) must be <= trace_length - 1 ({self.trace_length - 1}), "
                "or some steps are never a trained row of any item"
            )
        if self.core_state_size is not None and self.core_state_size <= 0:
            raise ValueError(f"core_state_size must be > 0, got {self.core_state_size}")
        require_unit_interval(self, "priority_eta", "importance_sampling_exponent", "actor_epsilon")
        require_non_negative(self, "priority_exponent", "actor_epsilon_alpha", "burn_in_length")

    @property
    def sequence_length(self) -> int:
        return self.burn_in_length + self.trace_length

    def sgd_steps_by(self, actor_steps: int) -> int:  # One item per `sequence_period` actor steps.
        items = actor_steps / self.sequence_period
        return max(0, round((items - self.min_replay_size) * self.samples_per_insert / self.batch_size))

    def actor_epsilon_of(self, actor_id: int) -> float | None:
        """Actor `actor_id`'s Ape-X epsilon, or None where the policy group decides."""
        if not self.per_actor_epsilon or self.num_actors < 2:
            return None
        exponent = 1.0 + self.actor_epsilon_alpha * actor_id / (self.num_actors - 1)
        return float(self.actor_epsilon**exponent)


make_builder = builder_factory("rl.agents.r2d2.builder:R2D2Builder", R2D2Config)
