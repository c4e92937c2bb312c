"""R2D2 hyperparameters: everything `agent.*` can override (conf/agent/r2d2.yaml)."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import ReplayConfig, check_learning_rate_decay
from rl.checks import require_non_negative, require_positive, require_unit_interval


@dataclasses.dataclass
class R2D2Config(ReplayConfig):
    # Replay items are sequences of burn_in_length + trace_length rows of one environment
    # copy, a new one every sequence_period rows (consecutive items overlap). The learner
    # unrolls the LSTM over the burn-in rows (no loss, no gradient) from the core state
    # stored with the item's first row, then trains on the trace's rows; the trace's last
    # row only bootstraps. Counts below (batch, replay sizes, samples per insert) are items.
    burn_in_length: int = 8
    trace_length: int = 40
    # null: trace_length // 2 (half the trace overlaps the next item, as in the paper).
    # Items start at rows 0, sequence_period, 2 * sequence_period, ... of each episode,
    # so an episode's first burn_in_length steps are never trained on: they are only ever
    # burn-in rows (the first item's; later items' too when sequence_period <
    # burn_in_length), and an episode of at most burn_in_length steps trains nothing.
    # With sequence_period <= trace_length - 1 every later step is a trained row of some
    # item.
    sequence_period: int | None = None
    n_step: int = 5
    discount: float = 0.997
    batch_size: int = 32
    samples_per_insert: float = 4.0
    min_replay_size: int = 100
    max_replay_size: int = 10_000
    replay_table_name: str = "r2d2_table"
    # Prioritized replay: P(i) ~ p_i ** priority_exponent, p_i = eta * max_t |td_t| +
    # (1 - eta) * mean_t |td_t| over the item's trained rows; new items get priority 1.
    priority_exponent: float = 0.9
    priority_eta: float = 0.9
    importance_sampling_exponent: float = 0.6
    # h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x on the n-step targets (Pohlen et al.);
    # false trains on raw returns.
    value_rescaling: bool = True
    rescaling_epsilon: float = 1e-3

    learning_rate: float = 1e-4
    # Linear decay of the learning rate to final_learning_rate_fraction of it by this actor
    # step (0 keeps it constant); conf/agent/r2d2.yaml sets the run's max_actor_steps.
    # Converted to SGD steps by `sgd_steps_by`, which counts one item per sequence_period
    # steps (the items an episode's end adds make the decay end a little early).
    learning_rate_decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 0.0
    # The decay's shape: "linear" or "cosine" (rl/agents/q_learning.py states both).
    learning_rate_decay: str = "linear"
    adam_eps: float = 1e-3
    max_gradient_norm: float = 40.0
    # In SGD steps (learner updates), not actor steps.
    target_update_period: int = 2500
    # Units of the LSTM's state stored with every step (conf/agent/r2d2.yaml reads it from
    # network.lstm_size): replay's layout is fixed before any network is built.
    core_state_size: int | None = None

    # Ape-X exploration under launcher=ray with num_actors > 1: actor i of N acts
    # epsilon-greedily with epsilon_i = actor_epsilon ** (1 + actor_epsilon_alpha * i / (N - 1))
    # instead of the policy group's schedule; false (or one actor) uses the policy group.
    per_actor_epsilon: bool = True
    actor_epsilon: float = 0.4
    actor_epsilon_alpha: float = 7.0
    # Actors in the run (conf/agent/r2d2.yaml reads launcher.num_actors; 1 without it).
    num_actors: int = 1
    variable_update_period: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sequence_period is None:
            self.sequence_period = max(1, self.trace_length // 2)
        require_positive(
            self,
            "trace_length",
            "sequence_period",
            "learning_rate",
            "adam_eps",
            "max_gradient_norm",
            "target_update_period",
            "rescaling_epsilon",
            "num_actors",
        )
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
        """SGD steps the replay ratio allows once `actor_steps` steps are taken, counting
        one item every `sequence_period` steps."""
        items = actor_steps / self.sequence_period
        return max(0, round((items - self.min_replay_size) * self.samples_per_insert / self.batch_size))

    def actor_epsilon_of(self, actor_id: int) -> float | None:
        """Actor `actor_id`'s fixed Ape-X epsilon, or None where the policy group decides."""
        if not self.per_actor_epsilon or self.num_actors < 2:
            return None
        exponent = 1.0 + self.actor_epsilon_alpha * actor_id / (self.num_actors - 1)
        return float(self.actor_epsilon**exponent)
