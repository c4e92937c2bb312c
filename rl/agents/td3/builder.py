"""Builds TD3's replay table, adder, actor, learner and policies."""

from __future__ import annotations

from rl.agents.builder import builder_factory
from rl.agents.continuous import ContinuousBuilder
from rl.agents.td3.config import TD3Config


class TD3Builder(ContinuousBuilder):
    @staticmethod
    def learner_class() -> type:
        from rl.agents.td3.learning import TD3Learner

        return TD3Learner


make_builder = builder_factory(TD3Builder, TD3Config)
