"""Builds TD3's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any

from rl.agents.continuous import ContinuousBuilder


class TD3Builder(ContinuousBuilder):
    def make_learning(self, networks: Any) -> Any:
        from rl.agents.td3.learning import make_learning

        return make_learning(networks, self.config)
