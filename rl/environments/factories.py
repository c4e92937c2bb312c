"""Factories named by `_target_` in conf/environment (no JAX import here: config checks stay fast)."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.util
from typing import Any

import dm_env
import gymnasium

from rl.environments.rendering import choose_mujoco_gl
from rl.environments.wrappers import GymnasiumToDmEnv
from rl.quiet import known_warnings_dropped

# Packages whose gymnasium ids exist once imported (ale_py's `ALE/Pong-v5`, ...);
# gymnasium's own (classic control, MuJoCo, Box2D, toy text) are always registered.
ENVIRONMENT_PACKAGES = ("ale_py", "shimmy", "gymnasium_robotics", "minigrid", "miniworld", "highway_env")
MUJOCO_TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")
_registered: set[str] = set()


def register_installed_families() -> list[str]:
    """Imports the installed ENVIRONMENT_PACKAGES once, registering their ids; returns those registered."""
    for package in ENVIRONMENT_PACKAGES:
        if package in _registered or importlib.util.find_spec(package) is None:
            continue
        try:
            module = importlib.import_module(package)
            gymnasium.register_envs(module)
            if package == "ale_py":  # No "A.L.E: Arcade Learning Environment ... [Powered by Stella]" banner.
                module.ALEInterface.setLoggerMode(module.LoggerMode.Error)
        except Exception:  # noqa: BLE001 - a broken optional package must not stop the others.
            continue
        _registered.add(package)
    return sorted(_registered)


def environment_family(env_id: str) -> str:
    """A registered id's namespace (`ALE`), else its entry point's package or gymnasium module
    (`gymnasium.envs.mujoco`)."""
    spec = gymnasium.envs.registry[env_id]
    if spec.namespace:
        return spec.namespace
    entry_point = spec.entry_point
    module = entry_point.split(":")[0] if isinstance(entry_point, str) else entry_point.__module__
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["gymnasium", "envs"] else parts[0]


def _suggestion(name: str) -> str:
    """Close registered ids from the family `name` seems to belong to."""
    known = sorted(gymnasium.envs.registry.keys())
    namespace, _, _ = name.rpartition("/")
    if namespace:
        family = [env_id for env_id in known if env_id.rpartition("/")[0].lower() == namespace.lower()]
        if not family:
            spaces = sorted({env_id.rpartition("/")[0] for env_id in known if "/" in env_id})
            return f"there is no '{namespace}' namespace (installed namespaces: {spaces})"
    else:
        nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        family = known if not nearest else [i for i in known if environment_family(i) == environment_family(nearest[0])]
    # The same name in some namespace (Pong-v5 -> ALE/Pong-v5), or in another case, first.
    close = [env_id for env_id in known if env_id.rpartition("/")[2].lower() == name.rpartition("/")[2].lower()]
    close += [env_id for env_id in difflib.get_close_matches(name, family, n=5, cutoff=0.5) if env_id not in close]
    if close:
        return f"did you mean one of {close[:5]}?"
    return f"registered ids include {family[:8]}"


def validate_gymnasium_id(name: str) -> None:
    """A ValueError naming close ids (of the same family) unless `name` is registered (all families imported)."""
    if name in gymnasium.envs.registry:
        return
    register_installed_families()
    if name not in gymnasium.envs.registry:
        raise ValueError(f"'{name}' is not a registered gymnasium environment; {_suggestion(name)}")


def make_gymnasium_environment(
    name: str,
    seed: int,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
) -> GymnasiumToDmEnv:
    """Gymnasium environment `name` as a float32 dm_env seeded with a uint32 (MuJoCo's known warnings dropped)."""
    validate_gymnasium_id(name)
    mujoco_task = environment_family(name) == "gymnasium.envs.mujoco"
    with known_warnings_dropped() if mujoco_task else contextlib.nullcontext():
        environment = gymnasium.make(
            name, render_mode=render_mode, max_episode_steps=max_episode_steps, **(kwargs or {})
        )
    environment.action_space.seed(int(seed))
    return GymnasiumToDmEnv(environment, seed=int(seed))


def make_mujoco_environment(
    seed: int,
    name: str = "HalfCheetah-v5",
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> dm_env.Environment:
    """A gymnasium MuJoCo task; `render_mode="rgb_array"` renders headless (rl/environments/rendering.py)."""
    validate_gymnasium_id(name)
    if not str(gymnasium.envs.registry[name].entry_point).startswith("gymnasium.envs.mujoco"):
        raise ValueError(
            f"'{name}' is not a gymnasium MuJoCo task; use one of {list(MUJOCO_TASKS)} "
            "(or environment=gymnasium for other ids)"
        )
    choose_mujoco_gl(rendering=render_mode is not None)
    return make_gymnasium_environment(
        name, seed, render_mode=render_mode, max_episode_steps=max_episode_steps, kwargs=kwargs
    )


def make_gymnax_environment(name: str, seed: int, kwargs: dict[str, Any] | None = None) -> dm_env.Environment:
    """gymnax environment `name` (CartPole-v1, Breakout-MinAtar, ...) as a float32 dm_env; `kwargs`
    go to `gymnax.make`. launcher=anakin compiles it instead (`is_jax_native`)."""
    from rl.environments.gymnax_vector import GymnaxToDmEnv

    return GymnaxToDmEnv(name, seed, kwargs)


# Factories whose environments compile into a JAX program.
JAX_NATIVE = (make_gymnax_environment,)


def is_jax_native(environment_factory: Any) -> bool:
    """Whether an environment factory (a `_target_`, or a functools.partial of one) is in JAX_NATIVE."""
    partial = isinstance(environment_factory, functools.partial)
    return (environment_factory.func if partial else environment_factory) in JAX_NATIVE
