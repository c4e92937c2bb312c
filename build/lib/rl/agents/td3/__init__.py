"""TD3: twin critics, target policy smoothing and delayed policy updates; `TD3Config` holds
everything `agent.*` can override (exploration is `policy.sigma` and `policy.warmup_steps`)."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import ContinuousConfig, builder_factory
from rl.checks import require_non_negative, require_positive


@dataclasses.dataclass
class TD3Config(ContinuousConfig):
    # The policy and the target networks are updated once per this many critic updates.
    policy_delay: int = 2
    # Target policy smoothing: N(0, sigma^2) noise clipped to +-noise_clip, in [-1, 1] units.
    target_policy_sigma: float = 0.2
    target_noise_clip: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "policy_delay")
        require_non_negative(self, "target_policy_sigma", "target_noise_clip")


make_builder = builder_factory("rl.agents.td3.builder:TD3Builder", TD3Config)
