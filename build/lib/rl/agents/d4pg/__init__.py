"""D4PG: deterministic policy, categorical critic on projected n-step Bellman targets;
`D4PGConfig` holds everything `agent.*` can override (exploration noise is `policy.sigma`)."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import ContinuousConfig, builder_factory
from rl.checks import require_at_least


@dataclasses.dataclass
class D4PGConfig(ContinuousConfig):
    policy_learning_rate: float = 1e-4
    critic_learning_rate: float = 1e-4
    n_step: int = 5
    # The categorical critic's support: num_atoms evenly spaced values in [v_min, v_max].
    num_atoms: int = 51
    v_min: float = -150.0
    v_max: float = 150.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(self, 2, "num_atoms")
        if not self.v_min < self.v_max:
            raise ValueError(f"v_min ({self.v_min}) must be < v_max ({self.v_max})")


make_builder = builder_factory("rl.agents.d4pg.builder:D4PGBuilder", D4PGConfig)
