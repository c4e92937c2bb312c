"""PPO hyperparameters: everything `agent.*` can override (conf/agent/ppo.yaml)."""

from __future__ import annotations

import dataclasses

from rl.checks import require_positive


@dataclasses.dataclass
class PPOConfig:
    # Steps per stored sequence (the RL-Zoo's n_steps): an item holds unroll_length + 1
    # rows, the last one only bootstrapping the return (consecutive items share it).
    unroll_length: int = 32
    # Sequences per learner step: one learner step trains on batch_size * unroll_length
    # steps (fewer where an episode ended inside a sequence and it was padded).
    batch_size: int = 8
    # Passes over each batch, each in num_minibatches shuffled minibatches; all the SGD
    # steps of a batch run in one jitted lax.scan.
    num_epochs: int = 10
    num_minibatches: int = 4
    # Items the queue holds before actors wait (null: two batches). A small queue keeps
    # the data close to on-policy (each actor may have up to num_envs - 1 more items
    # waiting to go in).
    max_queue_size: int | None = None

    discount: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 3e-4
    # PPO's clipping range: the probability ratio is clipped to [1 - eps, 1 + eps].
    clip_epsilon: float = 0.2
    # Linear decay of the learning rate and of clip_epsilon to these fractions of their
    # values by this many actor steps (counted as the steps the learner has trained on);
    # conf/agent/ppo.yaml sets it to the run's max_actor_steps. 0 keeps both constant.
    decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 1.0
    final_clip_epsilon_fraction: float = 1.0
    # Value predictions clipped to within this of the batch's initial values (null: not
    # clipped), as in OpenAI's baselines.
    value_clip_epsilon: float | None = None
    value_cost: float = 0.5
    entropy_cost: float = 0.0
    normalize_advantages: bool = True
    # Normalise observations by running statistics (kept by the learner, served with the
    # policy's parameters), clipped to [-observation_clip, observation_clip].
    normalize_observations: bool = False
    observation_clip: float = 10.0
    max_gradient_norm: float = 0.5
    adam_eps: float = 1e-5
    # Actor steps between two fetches of the learner's parameters.
    variable_update_period: int = 1
    replay_table_name: str = "ppo_queue"

    def __post_init__(self) -> None:
        require_positive(
            self,
            "unroll_length",
            "batch_size",
            "num_epochs",
            "num_minibatches",
            "learning_rate",
            "clip_epsilon",
            "max_gradient_norm",
            "adam_eps",
            "variable_update_period",
            "observation_clip",
        )
        for name in ("discount", "gae_lambda", "final_learning_rate_fraction", "final_clip_epsilon_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("value_cost", "entropy_cost"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.decay_actor_steps < 0:
            raise ValueError(f"decay_actor_steps must be >= 0, got {self.decay_actor_steps}")
        if self.value_clip_epsilon is not None and self.value_clip_epsilon <= 0:
            raise ValueError(f"value_clip_epsilon must be > 0 or null, got {self.value_clip_epsilon}")
        if (self.batch_size * self.unroll_length) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide the batch's "
                f"batch_size * unroll_length = {self.batch_size * self.unroll_length} steps"
            )
        if self.max_queue_size is not None and self.max_queue_size < self.batch_size:
            raise ValueError(
                f"max_queue_size ({self.max_queue_size}) must be >= batch_size ({self.batch_size}): "
                "the learner could never sample a batch"
            )

    @property
    def queue_size(self) -> int:
        return self.max_queue_size if self.max_queue_size is not None else 2 * self.batch_size

    @property
    def sequence_length(self) -> int:
        return self.unroll_length + 1
