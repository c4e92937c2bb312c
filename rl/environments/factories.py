"""Factories named by `_target_` in conf/environment (gymnasium, MuJoCo, DeepMind Control Suite,
gymnax, MuJoCo Playground), the gymnasium -> dm_env adapter and a video's frame rate (headless rendering is
rl/environments/rendering.py's). No JAX import here: config checks stay fast."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.util
from typing import Any

import dm_env
import gymnasium
import numpy as np
import tree
from dm_env import specs

from rl.environments.rendering import choose_mujoco_gl, missing_backend_message
from rl.environments.specs import Float32Specs, RenderingError, space_to_spec
from rl.library_output import known_warnings_dropped


def render_fps(environment: Any, default: int = 30) -> int:
    """Frames per second of an environment's video: gymnasium's metadata, dm_control's timestep, or `default`."""
    if isinstance(environment, GymnasiumToDmEnv) and environment.gymnasium_environment.metadata.get("render_fps"):
        return int(round(environment.gymnasium_environment.metadata["render_fps"]))
    if isinstance(environment, FlatDmControlWrapper):
        return max(1, int(round(1.0 / environment._environment.control_timestep())))
    return default


class GymnasiumToDmEnv(Float32Specs, dm_env.Environment):
    """A float32 dm_env view of a gymnasium environment: termination ends the episode with discount 0,
    truncation (a time limit) with discount 1. Only the first reset is seeded."""

    def __init__(self, environment: gymnasium.Env, seed: int | None = None):
        self.gymnasium_environment = self._environment = environment
        self._seed = seed
        self._reset_next = True
        self._observation_spec = space_to_spec(environment.observation_space, "observation", float32=True)
        self._single_dtype = None if tree.is_nested(self._observation_spec) else self._observation_spec.dtype
        self._action_spec = space_to_spec(environment.action_space, "action")

    def _timestep(self, step_type: dm_env.StepType, reward: Any, discount: Any, observation: Any) -> dm_env.TimeStep:
        if self._single_dtype is not None:
            observation = np.asarray(observation, dtype=self._single_dtype)
        else:
            observation = tree.map_structure(
                lambda x, s: np.asarray(x, dtype=s.dtype), observation, self._observation_spec
            )
        return dm_env.TimeStep(step_type, reward, discount, observation)

    def reset(self) -> dm_env.TimeStep:
        observation, _ = self._environment.reset(seed=self._seed)
        self.game_score = self._seed = None
        self._reset_next = False
        return self._timestep(dm_env.StepType.FIRST, None, None, observation)

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next:
            return self.reset()
        if isinstance(self._action_spec, specs.DiscreteArray):
            action = int(action)
        observation, reward, terminated, truncated, info = self._environment.step(action)
        self.game_score = info["game_score"]["r"] if "game_score" in info else None
        self._reset_next = terminated or truncated
        step_type = dm_env.StepType.LAST if self._reset_next else dm_env.StepType.MID
        return self._timestep(step_type, np.float32(reward), np.float32(0.0 if terminated else 1.0), observation)

    def render(self) -> Any:
        return self._environment.render()

    def close(self) -> None:
        self._environment.close()


# Packages whose gymnasium ids exist once imported (ale_py's `ALE/Pong-v5`, ...).
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
            if package == "ale_py":  # No banner.
                module.ALEInterface.setLoggerMode(module.LoggerMode.Error)
        except Exception:  # noqa: BLE001 - a broken optional package must not stop the others.
            continue
        _registered.add(package)
    return sorted(_registered)


def environment_family(env_id: str) -> str:
    """A registered id's namespace (`ALE`), else its entry point's package or gymnasium module."""
    spec = gymnasium.envs.registry[env_id]
    if spec.namespace:
        return spec.namespace
    entry_point = spec.entry_point
    module = entry_point.split(":")[0] if isinstance(entry_point, str) else entry_point.__module__
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["gymnasium", "envs"] else parts[0]


def validate_gymnasium_id(name: str) -> None:
    """A ValueError naming close ids (of the same family) unless `name` is registered (all families imported)."""
    if name not in gymnasium.envs.registry:
        register_installed_families()
    if name in gymnasium.envs.registry:
        return
    known = sorted(gymnasium.envs.registry.keys())
    namespace, _, _ = name.rpartition("/")
    if namespace:
        family = [env_id for env_id in known if env_id.rpartition("/")[0].lower() == namespace.lower()]
        if not family:
            spaces = sorted({env_id.rpartition("/")[0] for env_id in known if "/" in env_id})
            hint = f"there is no '{namespace}' namespace (installed namespaces: {spaces})"
            raise ValueError(f"'{name}' is not a registered gymnasium environment; {hint}")
    else:
        nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        family = known if not nearest else [i for i in known if environment_family(i) == environment_family(nearest[0])]
    # The same name in another namespace or case first (Pong-v5 -> ALE/Pong-v5).
    close = [env_id for env_id in known if env_id.rpartition("/")[2].lower() == name.rpartition("/")[2].lower()]
    close += [env_id for env_id in difflib.get_close_matches(name, family, n=5, cutoff=0.5) if env_id not in close]
    hint = f"did you mean one of {close[:5]}?" if close else f"registered ids include {family[:8]}"
    raise ValueError(f"'{name}' is not a registered gymnasium environment; {hint}")


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
    """A gymnasium MuJoCo task; `render_mode="rgb_array"` renders headless (`choose_mujoco_gl`)."""
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


def _suite(rendering: bool = False) -> Any:
    # dm_control picks its OpenGL backend when first imported.
    choose_mujoco_gl(rendering)
    try:
        from dm_control import suite
    except Exception as error:  # noqa: BLE001 - a broken OpenGL backend fails the import.
        if not rendering:
            raise
        raise RenderingError(missing_backend_message(str(error).strip().splitlines()[-1][:200])) from None
    return suite


class FlatDmControlWrapper(Float32Specs, dm_env.Environment):
    """The observation dict as one float32 vector, float32 actions and rewards; time limits truncate."""

    def __init__(self, environment: dm_env.Environment, max_episode_steps: int | None, render_mode: str | None):
        self._environment = environment
        self._render_mode = render_mode
        self._keys = list(environment.observation_spec().keys())
        size = sum(int(np.prod(spec.shape)) for spec in environment.observation_spec().values())
        self._observation_spec = specs.Array((size,), np.float32, "observation")
        action = environment.action_spec()
        bounds = (np.asarray(action.minimum, np.float32), np.asarray(action.maximum, np.float32))
        self._action_spec = specs.BoundedArray(action.shape, np.float32, *bounds, "action")
        self._action_dtype = action.dtype
        self._max_episode_steps = max_episode_steps
        self._steps = 0
        self._reset_next = True

    def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        observation = np.concatenate([np.asarray(timestep.observation[key], np.float32).ravel() for key in self._keys])
        reward = None if timestep.reward is None else np.float32(timestep.reward)
        discount = None if timestep.discount is None else np.float32(timestep.discount)
        return timestep._replace(observation=observation, reward=reward, discount=discount)

    def reset(self) -> dm_env.TimeStep:
        self._steps = 0
        self._reset_next = False
        return self._convert(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next:
            return self.reset()
        timestep = self._environment.step(np.asarray(action, self._action_dtype))
        self._steps += 1
        if not timestep.last() and self._max_episode_steps is not None and self._steps >= self._max_episode_steps:
            timestep = dm_env.truncation(timestep.reward, timestep.observation, timestep.discount)
        self._reset_next = timestep.last()
        return self._convert(timestep)

    def close(self) -> None:
        self._environment.close()

    def render(self) -> np.ndarray:
        """An RGB frame of camera 0, 480 x 640 (made with `render_mode="rgb_array"`)."""
        if self._render_mode != "rgb_array":
            raise RenderingError("this dm_control environment was made without render_mode='rgb_array'")
        return self._environment.physics.render(height=480, width=640, camera_id=0)


def make_dm_control_environment(
    seed: int,
    domain: str = "cheetah",
    task: str = "run",
    max_episode_steps: int | None = None,
    task_kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    render_mode: str | None = None,
) -> dm_env.Environment:
    """Control Suite task `domain`-`task` seeded with a uint32 (`name` only labels runs)."""
    if max_episode_steps is not None and max_episode_steps <= 0:
        raise ValueError(f"max_episode_steps must be > 0 or null, got {max_episode_steps}")
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"render_mode must be null or 'rgb_array', got {render_mode!r}")
    suite = _suite()
    if (domain, task) not in suite.ALL_TASKS:
        domains = sorted({d for d, _ in suite.ALL_TASKS})
        if domain not in domains:
            raise ValueError(f"unknown dm_control domain '{domain}'; domains: {domains}")
        tasks = sorted(t for d, t in suite.ALL_TASKS if d == domain)
        raise ValueError(f"unknown task '{task}' for dm_control domain '{domain}'; tasks: {tasks}")
    suite = _suite(rendering=render_mode is not None)
    with known_warnings_dropped():  # cheetah's model: a 'settotalmass' deprecation on every load.
        environment = suite.load(domain, task, task_kwargs={**(task_kwargs or {}), "random": int(seed)})
    return FlatDmControlWrapper(environment, max_episode_steps, render_mode)


def make_gymnax_environment(
    name: str, seed: int, kwargs: dict[str, Any] | None = None, render_mode: str | None = None
) -> dm_env.Environment:
    """gymnax environment `name` as a float32 dm_env (`kwargs` go to `gymnax.make`); launcher=anakin compiles it.
    `render_mode="rgb_array"`: frames of the classic-control tasks (drawn by gymnasium's twin)."""
    from rl.environments.gymnax_vector import GymnaxToDmEnv

    return GymnaxToDmEnv(name, seed, kwargs, render_mode)


def make_playground_environment(
    name: str, seed: int, kwargs: dict[str, Any] | None = None, render_mode: str | None = None
) -> dm_env.Environment:
    """MuJoCo Playground environment `name` (its DM Control Suite: CheetahRun, ...) as a float32 dm_env;
    `kwargs`: Playground's settings (`impl`, `episode_length`, `action_repeat`, ...; null keeps its own).
    launcher=anakin compiles it; any bad name or setting is a ValueError of one line."""
    from rl.environments.playground import PlaygroundToDmEnv

    return PlaygroundToDmEnv(name, seed, kwargs, render_mode)


def factory_function(environment_factory: Any) -> Any:
    """The function an environment factory calls (itself, or a functools.partial's function)."""
    partial = isinstance(environment_factory, functools.partial)
    return environment_factory.func if partial else environment_factory


# The factories whose environments compile into a JAX program, by the family of vector environment they make.
JAX_FAMILIES = {make_gymnax_environment: "gymnax", make_playground_environment: "playground"}


def jax_family(environment_factory: Any) -> str | None:
    """The JAX family (`JAX_FAMILIES`) of an environment factory or a functools.partial of one; None: a host one."""
    return JAX_FAMILIES.get(factory_function(environment_factory))


def is_jax_native(environment_factory: Any) -> bool:
    """Whether an environment factory (or a functools.partial of one) compiles into a JAX program."""
    return jax_family(environment_factory) is not None
