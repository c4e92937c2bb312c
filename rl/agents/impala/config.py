"""IMPALA hyperparameters: everything `agent.*` can override (conf/agent/impala.yaml)."""

from __future__ import annotations

import dataclasses

from rl.checks import require_positive

OPTIMIZERS = ("adam", "rmsprop")


@dataclasses.dataclass
class IMPALAConfig:
    # Steps per stored sequence: an item holds unroll_length + 1 rows, the last one only
    # bootstrapping the V-trace targets (consecutive items share it).
    unroll_length: int = 20
    # Sequences per SGD step; a learner step takes batch_size * sgd_steps_per_learner_step
    # sequences from the queue and runs that many SGD steps in one jitted lax.scan.
    batch_size: int = 8
    sgd_steps_per_learner_step: int = 1
    # Items the queue holds before actors wait (null: two learner steps' worth). Each item
    # is trained on once; the bound is how far actors may run ahead of the learner (and so
    # how off-policy the data may get, which V-trace corrects).
    max_queue_size: int | None = None

    discount: float = 0.99
    # V-trace: importance ratios clipped at clip_rho_threshold in the value targets
    # (rho-bar) and at clip_pg_rho_threshold in the policy-gradient advantage; the traces
    # c_t = lambda * min(1, rho_t).
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    vtrace_lambda: float = 1.0

    optimizer: str = "adam"
    learning_rate: float = 6e-4
    # Linear decay of the learning rate to final_learning_rate_fraction of it by this many
    # actor steps (counted as the steps the learner has trained on); conf/agent/impala.yaml
    # sets it to the run's max_actor_steps. 0 keeps it constant.
    decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 1.0
    # Adam's epsilon, or RMSProp's (added to the root of the mean square).
    optimizer_eps: float = 1e-5
    # RMSProp's decay of the mean square of the gradients.
    rmsprop_decay: float = 0.99
    max_gradient_norm: float = 40.0
    value_cost: float = 0.5
    entropy_cost: float = 0.01
    # Actor steps between two fetches of the learner's parameters.
    variable_update_period: int = 1
    replay_table_name: str = "impala_queue"

    def __post_init__(self) -> None:
        require_positive(
            self,
            "unroll_length",
            "batch_size",
            "sgd_steps_per_learner_step",
            "learning_rate",
            "optimizer_eps",
            "max_gradient_norm",
            "variable_update_period",
            "clip_rho_threshold",
            "clip_pg_rho_threshold",
        )
        for name in ("discount", "vtrace_lambda", "final_learning_rate_fraction", "rmsprop_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("value_cost", "entropy_cost"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.decay_actor_steps < 0:
            raise ValueError(f"decay_actor_steps must be >= 0, got {self.decay_actor_steps}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.max_queue_size is not None and self.max_queue_size < self.sequences_per_learner_step:
            raise ValueError(
                f"max_queue_size ({self.max_queue_size}) must be >= batch_size * sgd_steps_per_learner_step "
                f"({self.sequences_per_learner_step}): the learner could never sample a batch"
            )

    @property
    def sequences_per_learner_step(self) -> int:
        return self.batch_size * self.sgd_steps_per_learner_step

    @property
    def queue_size(self) -> int:
        return self.max_queue_size if self.max_queue_size is not None else 2 * self.sequences_per_learner_step

    @property
    def sequence_length(self) -> int:
        return self.unroll_length + 1

    # What the shared sequence builder (rl/agents/ppo/builder.py) reads: IMPALA acts on
    # raw observations (not configurable, so `agent.normalize_observations` is refused).
    @property
    def normalize_observations(self) -> bool:
        return False

    @property
    def observation_clip(self) -> float:
        return 0.0
