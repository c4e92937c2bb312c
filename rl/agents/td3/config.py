"""TD3 hyperparameters: everything `agent.*` can override.

Exploration noise and the uniform-random warm-up are behaviour-policy settings:
`policy.sigma` and `policy.warmup_steps` (conf/policy/gaussian_noise.yaml).
"""

from __future__ import annotations

import dataclasses

from rl.agents.continuous import ContinuousConfig


@dataclasses.dataclass
class TD3Config(ContinuousConfig):
    # The policy and the target networks are updated once per this many critic updates.
    policy_delay: int = 2
    # Target policy smoothing: N(0, sigma^2) noise clipped to +-noise_clip, in [-1, 1] units.
    target_policy_sigma: float = 0.2
    target_noise_clip: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.policy_delay <= 0:
            raise ValueError(f"policy_delay must be > 0, got {self.policy_delay}")
        for name in ("target_policy_sigma", "target_noise_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
