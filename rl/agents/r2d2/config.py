"""R2D2 hyperparameters: everything `agent.*` can override (conf/agent/r2d2.yaml)."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import ReplayConfig, check_learning_rate_decay
from rl.checks import require_non_negative, require_positive, require_unit_interval


@dataclasses.dataclass
class R2D2Config(ReplayConfig):
    # Replay items are burn_in_length + trace_length rows of one environment copy, a new
    # one every sequence_period rows (null: trace_length // 2, as in the paper). The
    # learner unrolls the LSTM over the burn-in rows (no loss) from the core state stored
    # with the item's first row, then trains on the trace (its last row only bootstraps),
    # so an episode's first burn_in_length steps are never trained on. Counts below
    # (batch, replay sizes, samples per insert) are items.
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
    # P(i) ~ p_i ** priority_exponent, p_i = eta * max_t |td_t| + (1 - eta) * mean_t |td_t|
    # over the item's trained rows; new items get priority 1.
    priority_exponent: float = 0.9
    priority_eta: float = 0.9
    importance_sampling_exponent: float = 0.6
    # h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x on the n-step targets (Pohlen et al.).
    value_rescaling: bool = True
    rescaling_epsilon: float = 1e-3

    learning_rate: float = 1e-4
    # Decay ("linear" or "cosine", rl/agents/q_learning.py) to final_learning_rate_fraction
    # of the rate by this actor step (0: constant), counted as one item per sequence_period
    # steps (`sgd_steps_by`; the items an episode's end adds make it end a little early).
    learning_rate_decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 0.0
    learning_rate_decay: str = "linear"
    adam_eps: float = 1e-3
    max_gradient_norm: float = 40.0
    target_update_period: int = 2500
    # Units of the LSTM state stored with every step (replay's layout precedes the network).
    core_state_size: int | None = None

    # Ape-X exploration with num_actors > 1 (launcher=ray): actor i of N acts with epsilon
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
        require_positive(self, "trace_length", "sequence_period", "learning_rate", "adam_eps", "max_gradient_norm")
        require_positive(self, "target_update_period", "rescaling_epsilon", "num_actors")
        if self.trace_length < 2:
            raise ValueError(f"trace_length must be >= 2 (a trained row and its bootstrap), got {self.trace_length}")
        if self.sequence_period > self.trace_length - 1:
            raise ValueError(
                f"sequence_period ({self.sequence_period}) must be <= trace_length - 1 ({self.trace_length - 1}), "
                "or some steps are never a trained row of any item"
            )
        check_learning_rate_decay(self)
        if self.core_state_size is not None and self.core_state_size <= 0:
            raise ValueError(f"core_state_size must be > 0, got {self.core_state_size}")
        require_unit_interval(self, "priority_eta", "importance_sampling_exponent", "actor_epsilon")
        require_non_negative(self, "priority_exponent", "actor_epsilon_alpha", "burn_in_length")

    @property
    def sequence_length(self) -> int:
        return self.burn_in_length + self.trace_length

    def sgd_steps_by(self, actor_steps: int) -> int:
        """SGD steps the replay ratio allows by `actor_steps` (one item per `sequence_period`)."""
        items = actor_steps / self.sequence_period
        return max(0, round((items - self.min_replay_size) * self.samples_per_insert / self.batch_size))

    def actor_epsilon_of(self, actor_id: int) -> float | None:
        """Actor `actor_id`'s fixed Ape-X epsilon, or None where the policy group decides."""
        if not self.per_actor_epsilon or self.num_actors < 2:
            return None
        exponent = 1.0 + self.actor_epsilon_alpha * actor_id / (self.num_actors - 1)
        return float(self.actor_epsilon**exponent)
