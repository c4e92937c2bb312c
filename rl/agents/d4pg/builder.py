"""Builds D4PG's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any

from rl.agents.continuous import ContinuousBuilder
from rl.policies import GaussianNoise


class D4PGBuilder(ContinuousBuilder):
    def make_learning(self, networks: Any) -> Any:
        from rl.agents.d4pg.learning import make_learning

        return make_learning(networks, self.config)

    def default_exploration(self) -> Any:
        return GaussianNoise(sigma=0.3)
