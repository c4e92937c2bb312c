"""Soft Actor-Critic: twin critics, tanh-Gaussian policy, automatic entropy temperature;
`SACConfig` holds everything `agent.*` can override."""

from __future__ import annotations

import dataclasses

from rl.agents.configs import ContinuousConfig, builder_factory
from rl.checks import require_positive


@dataclasses.dataclass
class SACConfig(ContinuousConfig):
    temperature_learning_rate: float = 3e-4  # Of the log entropy temperature.
    initial_temperature: float = 1.0
    # Target policy entropy; null means target_entropy_per_action * |A| (the action dimension).
    target_entropy: float | None = None
    # -1 gives the usual -|A|; Brax's SAC (Playground's settings) aims at -0.5 |A|.
    target_entropy_per_action: float = -1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "temperature_learning_rate", "initial_temperature")


make_builder = builder_factory("rl.agents.sac.builder:SACBuilder", SACConfig)
