"""Builds TD3's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any

from rl.agents.builder import builder_factory
from rl.agents.continuous import ContinuousBuilder
from rl.agents.td3.config import TD3Config


class TD3Builder(ContinuousBuilder):
    def make_learning(self, networks: Any) -> Any:
        from rl.agents.td3.learning import make_learning

        return make_learning(networks, self.config)


make_builder = builder_factory(TD3Builder, TD3Config)
