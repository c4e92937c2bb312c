"""Environment specs: the shapes and dtypes networks and replay tables are built from."""

from __future__ import annotations

import dataclasses
from typing import Any

import dm_env
from dm_env import specs


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    observations: Any
    actions: Any
    rewards: Any
    discounts: Any


def make_environment_spec(environment: dm_env.Environment) -> EnvironmentSpec:
    return EnvironmentSpec(
        observations=environment.observation_spec(),
        actions=environment.action_spec(),
        rewards=environment.reward_spec(),
        discounts=environment.discount_spec(),
    )


def is_discrete(action_spec: Any) -> bool:
    """True for a single categorical action, the only kind value-based agents can act in."""
    return isinstance(action_spec, specs.DiscreteArray)


def num_actions(action_spec: Any) -> int:
    if not is_discrete(action_spec):
        raise ValueError(f"expected a discrete action spec, got {action_spec}")
    return int(action_spec.num_values)
