"""IMPALA: an actor-critic learning from a queue of sequences that asynchronous actors
fill, off-policy corrected by V-trace (Espeholt et al., 2018); `IMPALAConfig` holds
everything `agent.*` can override (conf/agent/impala.yaml)."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import OnPolicyConfig, builder_factory
from rl.checks import require_positive, require_unit_interval

OPTIMIZERS = ("adam", "rmsprop")


@dataclasses.dataclass
class IMPALAConfig(OnPolicyConfig):
    # batch_size is sequences per SGD step; a learner step takes batch_size *
    # sgd_steps_per_learner_step from the queue (max_queue_size bounds how off-policy the
    # data may get, which V-trace corrects).
    LEARNER_STEP_SEQUENCES = "batch_size * sgd_steps_per_learner_step"

    learning_rate: float = 6e-4
    final_learning_rate_fraction: float = 0.0
    max_gradient_norm: float = 40.0
    entropy_cost: float = 0.01
    replay_table_name: str = "impala_queue"

    sgd_steps_per_learner_step: int = 1
    # V-trace: ratios clipped at clip_rho_threshold in the value targets and at
    # clip_pg_rho_threshold in the advantage; traces c_t = lambda * min(1, rho_t).
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    vtrace_lambda: float = 1.0

    optimizer: str = "adam"
    # Adam divides by sqrt(v_hat) + eps, RMSProp by sqrt(ms + eps), as TF1's RMSPropOptimizer
    # (the IMPALA paper's, epsilon 0.01) does.
    optimizer_eps: float = 1e-5
    # RMSProp's decay of the mean square of the gradients.
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

    # IMPALA acts on raw observations (not configurable: `agent.normalize_observations` is refused).
    @property
    def normalize_observations(self) -> bool:
        return False

    @property
    def observation_clip(self) -> float:
        return 0.0


make_builder = builder_factory("rl.agents.impala.builder:IMPALABuilder", IMPALAConfig)
