"""`environment.backend=envpool`: the envpool twin of each environment factory that has one. The factory a
config's `_target_` resolves to picks the twin (the function itself, however its module path is spelled)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import hydra.utils
from dm_env import specs

from rl.environments.atari import make_atari_envpool, make_atari_environment
from rl.environments.factories import make_gymnasium_environment, make_mujoco_environment
from rl.environments.vector import EnvpoolVectorEnvironment


def gymnasium_pool(environment: dict[str, Any]) -> Callable[..., EnvpoolVectorEnvironment]:
    """A gymnasium id's copies in envpool, with its `kwargs` and time limit."""
    options = {**(environment.get("kwargs") or {}), "max_episode_steps": environment.get("max_episode_steps")}
    return functools.partial(EnvpoolVectorEnvironment, str(environment.get("name")), **options)


def atari_pool(environment: dict[str, Any]) -> Callable[..., EnvpoolVectorEnvironment]:
    """A game's copies in envpool with its own options (preprocessing) and observation layout."""
    settings = {key: value for key, value in environment.items() if key not in ("_target_", "render_mode")}
    return functools.partial(make_atari_envpool, **settings)


POOLS: dict[Callable[..., Any], Callable[[dict[str, Any]], Callable[..., EnvpoolVectorEnvironment]]] = {
    make_gymnasium_environment: gymnasium_pool,
    make_mujoco_environment: gymnasium_pool,
    make_atari_environment: atari_pool,
}


def envpool_factory(environment: dict[str, Any], environment_spec: Any) -> Any:
    """`make(seed=..., num_envs=...)` for the composed `environment` group, or a ValueError saying
    why envpool cannot step it (not installed, not a gymnasium id, no such task, other specs)."""
    target = environment.get("_target_")
    pool = POOLS.get(hydra.utils.get_object(str(target))) if target else None
    if pool is None:
        raise ValueError(f"envpool steps gymnasium ids (environment=gymnasium, mujoco or atari), not {target}")
    factory = pool(environment)
    probe = factory(seed=0, num_envs=1)
    layout = lambda s: (type(s), s.shape, s.dtype, s.num_values if isinstance(s, specs.DiscreteArray) else None)
    try:
        for what, ours, theirs in (
            ("observations", environment_spec.observations, probe.observation_spec()),
            ("actions", environment_spec.actions, probe.action_spec()),
        ):
            if layout(ours) != layout(theirs):
                raise ValueError(f"envpool's '{probe.name}' has other {what} ({theirs}) than gymnasium's ({ours})")
    finally:
        probe.close()
    return factory
