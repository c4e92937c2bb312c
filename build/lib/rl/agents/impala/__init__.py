"""IMPALA: an actor-critic learning from a queue of sequences that asynchronous actors fill,
off-policy corrected by V-trace; `IMPALAConfig` holds everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import OnPolicyConfig, builder_factory
from rl.checks import require_positive, require_unit_interval

OPTIMIZERS = ("adam", "rmsprop")


@dataclasses.dataclass
class IMPALAConfig(OnPolicyConfig):
    # batch_size is sequences per SGD step; a learner step takes sgd_steps_per_learner_step batches.
    LEARNER_STEP_SEQUENCES = "batch_size * sgd_steps_per_learner_step"

    learning_rate: float = 6e-4
    final_learning_rate_fraction: float = 0.0
    max_gradient_norm: float = 40.0
    entropy_cost: float = 0.01
    replay_table_name: str = "impala_queue"

    sgd_steps_per_learner_step: int = 1
    # V-trace: ratio clipping in the value targets and in the advantage; traces lambda * min(1, rho_t).
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    vtrace_lambda: float = 1.0

    optimizer: str = "adam"
    # Adam divides by sqrt(v_hat) + eps, RMSProp by sqrt(ms + eps) (TF1's, the paper's).
    optimizer_eps: float = 1e-5
    rmsprop_decay: float = 0.99

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(
            self, "sgd_steps_per_learner_step", "optimizer_eps", "clip_rho_threshold", "clip_pg_rho_threshold"
        )
        require_unit_interval(self, "vtrace_lambda", "rmsprop_decay")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")

    @property
    def sequences_per_learner_step(self) -> int:
        return self.batch_size * self.sgd_steps_per_learner_step


make_builder = builder_factory("rl.agents.impala.builder:IMPALABuilder", IMPALAConfig)
