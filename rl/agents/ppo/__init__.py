"""Proximal Policy Optimisation: clipped surrogate, GAE, entropy bonus, from a reverb queue
of sequences; `PPOConfig` holds everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import OBSERVATION_CLIP, OnPolicyConfig, builder_factory
from rl.checks import require_positive, require_unit_interval


@dataclasses.dataclass
class PPOConfig(OnPolicyConfig):
    # unroll_length is the RL-Zoo's n_steps; a learner step trains on batch_size * unroll_length steps.
    unroll_length: int = 32
    replay_table_name: str = "ppo_queue"

    # Passes over each batch, each in num_minibatches shuffled minibatches (one lax.scan).
    num_epochs: int = 10
    num_minibatches: int = 4

    gae_lambda: float = 0.95
    # The probability ratio is clipped to [1 - eps, 1 + eps].
    clip_epsilon: float = 0.2
    # clip_epsilon decays with the learning rate (over decay_actor_steps) to this fraction.
    final_clip_epsilon_fraction: float = 1.0
    # Value predictions clipped to within this of the batch's initial ones (null: not).
    value_clip_epsilon: float | None = None
    normalize_advantages: bool = True
    # Normalise observations by the learner's running statistics, clipped to +-observation_clip.
    normalize_observations: bool = False
    observation_clip: float = OBSERVATION_CLIP
    adam_eps: float = 1e-5
    # The learner trains on rewards times this (Brax's reward_scaling); returns are logged unscaled.
    reward_scale: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(
            self, "num_epochs", "num_minibatches", "clip_epsilon", "adam_eps", "observation_clip", "reward_scale"
        )
        require_unit_interval(self, "gae_lambda", "final_clip_epsilon_fraction")
        if self.value_clip_epsilon is not None and self.value_clip_epsilon <= 0:
            raise ValueError(f"value_clip_epsilon must be > 0 or null, got {self.value_clip_epsilon}")
        if (self.batch_size * self.unroll_length) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide the batch's "
                f"batch_size * unroll_length = {self.batch_size * self.unroll_length} steps"
            )


make_builder = builder_factory("rl.agents.ppo.builder:PPOBuilder", PPOConfig)
