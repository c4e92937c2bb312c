"""Builds SAC's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any

from rl.agents.continuous import ContinuousBuilder
from rl.policies import Stochastic


class SACBuilder(ContinuousBuilder):
    def make_learning(self, networks: Any) -> Any:
        from rl.agents.sac.learning import make_learning

        return make_learning(networks, self.config)

    stochastic_policy = True

    def default_exploration(self) -> Any:
        return Stochastic()
