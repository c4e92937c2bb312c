"""`env`: raw environment steps/s with random actions, the bound of any actor.

Per task: gymnasium's environment alone (the reference), the same task as the dm_env an
actor steps (`rl.environments`, adapter and float32 wrapper included), and vectorised
copies (8, 32) through gymnasium's synchronous vector API and envpool (where envpool has
the task). Actions are drawn beforehand, so sampling them is not measured; episodes are
reset as they end. Vectorised rates count every copy's steps. `ratio`: steps/s relative
to one gymnasium environment of the task (measured in the same invocation).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import dm_env
import numpy as np
from dm_env import specs

from rl.benchmarks.common import Row, Settings, measure_rate, median, progress, ratio
from rl.environments.envpool_vector import EnvpoolVectorEnvironment, envpool_tasks, quietly
from rl.environments.vector import VectorEnvironment

TASKS = ("CartPole-v1", "Pendulum-v1", "HalfCheetah-v5")
VECTOR_SIZES = (8, 32)
# Random actions drawn up front and cycled through.
ACTION_POOL = 256


def random_actions(action_spec: Any, count: int, batch: int | None = None, seed: int = 0) -> list[np.ndarray]:
    """`count` random actions (each of `batch` rows when given) valid for a dm_env spec."""
    rng = np.random.default_rng(seed)
    shape = (count,) if batch is None else (count, batch)
    if isinstance(action_spec, specs.DiscreteArray):
        values = rng.integers(0, action_spec.num_values, size=shape).astype(action_spec.dtype)
    elif isinstance(action_spec, specs.BoundedArray):
        low = np.broadcast_to(action_spec.minimum, action_spec.shape)
        high = np.broadcast_to(action_spec.maximum, action_spec.shape)
        values = rng.uniform(low, high, size=shape + action_spec.shape).astype(action_spec.dtype)
    else:
        raise ValueError(f"cannot draw random actions for {action_spec}")
    return list(values)


class DmEnvStepper:
    """Steps a dm_env environment, or a vector of them, with random actions; resets what ends.

    A vector environment is recognised by its `num_envs`: it takes and returns batches
    and resets the copies named by `env_ids` (rl.environments.vector's interface).
    """

    def __init__(self, environment: Any, seed: int = 0):
        self.environment = environment
        self.num_envs = getattr(environment, "num_envs", None)
        self._actions = random_actions(environment.action_spec(), ACTION_POOL, self.num_envs, seed)
        self._k = 0
        self._timestep = environment.reset()

    def step(self) -> int:
        action = self._actions[self._k % ACTION_POOL]
        self._k += 1
        if self.num_envs is None:
            if self._timestep.last():
                self._timestep = self.environment.reset()
            self._timestep = self.environment.step(action)
            return 1
        ended = np.flatnonzero(np.asarray(self._timestep.step_type) == dm_env.StepType.LAST)
        if ended.size:
            self.environment.reset(env_ids=ended)
        self._timestep = self.environment.step(action)
        return self.num_envs


class GymnasiumStepper:
    """Steps a gymnasium environment (or vector environment) with pre-drawn actions."""

    def __init__(self, environment: Any, num_envs: int | None, seed: int = 0):
        self.environment = environment
        self.num_envs = num_envs
        environment.action_space.seed(seed)
        self._actions = [environment.action_space.sample() for _ in range(ACTION_POOL)]
        self._k = 0
        environment.reset(seed=seed)

    def step(self) -> int:
        action = self._actions[self._k % ACTION_POOL]
        self._k += 1
        if self.num_envs is None:
            _, _, terminated, truncated, _ = self.environment.step(action)
            if terminated or truncated:
                self.environment.reset()
            return 1
        self.environment.step(action)  # Vector environments reset finished copies themselves.
        return self.num_envs


class EnvpoolStepper:
    def __init__(self, environment: Any, num_envs: int, seed: int = 0):
        self.environment = environment
        self.num_envs = num_envs
        space = environment.action_space
        space.seed(seed)
        self._actions = [np.stack([space.sample() for _ in range(num_envs)]) for _ in range(ACTION_POOL // 8)]
        self._k = 0
        environment.reset()

    def step(self) -> int:
        self.environment.step(self._actions[self._k % len(self._actions)])
        self._k += 1
        return self.num_envs


def make_dm_env(task: str, seed: int = 0) -> dm_env.Environment:
    from rl.environments import MUJOCO_TASKS, make_gymnasium_environment, make_mujoco_environment

    if task in MUJOCO_TASKS:
        return make_mujoco_environment(seed=seed, name=task)
    return make_gymnasium_environment(task, seed=seed)


def environment_rate(make_stepper: Callable[[], Any], settings: Settings) -> float | None:
    """Median steps/s over `settings.repeats` measurements of one fresh stepper."""
    stepper = make_stepper()
    try:
        for _ in range(10):  # Warm-up: first resets, caches.
            stepper.step()
        return median([measure_rate(stepper.step, settings.seconds) for _ in range(settings.repeats)])
    finally:
        stepper.environment.close()


def _cases(task: str) -> list[tuple[str, Callable[[], Any]]]:
    """(name, stepper factory) per case of one task; the first is the reference."""
    import gymnasium

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("gymnasium", lambda: GymnasiumStepper(gymnasium.make(task), None)),
        ("dm_env (rl.environments)", lambda: DmEnvStepper(make_dm_env(task))),
    ]
    for n in VECTOR_SIZES:
        cases.append(
            (
                f"gymnasium vector x{n}",
                lambda n=n: GymnasiumStepper(gymnasium.make_vec(task, num_envs=n, vectorization_mode="sync"), n),
            )
        )
    for n in VECTOR_SIZES:  # What an actor steps with environment.num_envs=n (backend=gymnasium).
        cases.append(
            (
                f"VectorEnvironment x{n} (rl.environments)",
                lambda n=n: DmEnvStepper(VectorEnvironment.make(lambda seed: make_dm_env(task, seed), 0, n)),
            )
        )
    if task in envpool_tasks():
        import envpool

        for n in VECTOR_SIZES:
            cases.append(
                (
                    f"envpool x{n}",
                    lambda n=n: EnvpoolStepper(
                        quietly(envpool.make, task, env_type="gymnasium", num_envs=n, seed=0), n
                    ),
                )
            )
            cases.append(  # ... and with environment.backend=envpool.
                (
                    f"envpool x{n} (rl.environments)",
                    lambda n=n: DmEnvStepper(EnvpoolVectorEnvironment(task, 0, n)),
                )
            )
    return cases


def suite_env(settings: Settings) -> list[Row]:
    # envpool's spaces are float64 bounds cast to float32: gymnasium warns once per space.
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
    rows: list[Row] = []
    for task in TASKS:
        cases = _cases(task)
        if not any(name.startswith("envpool") for name, _ in cases):
            settings.note(f"env: envpool has no {task}; its envpool cases are skipped")
        reference = None
        for name, make_stepper in cases:
            value = environment_rate(make_stepper, settings)
            # The first case, one gymnasium environment, is what the others are compared with.
            row = Row("env", f"{task} {name}", value, "steps/s", ratio=ratio(value, reference))
            reference = value if reference is None else reference
            rows.append(row)
            progress(f"env {row.case}: {value:,.0f} steps/s")
    return rows
