"""Experiment: everything needed to build the nodes of one experiment; and the XLA cache."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import dm_env

from rl.checkpointing import CheckpointSettings
from rl.checks import require_positive
from rl.experiments.hooks import RunHook
from rl.loggers.base import LoggerFactory
from rl.core import EnvironmentSpec, make_environment_spec

if TYPE_CHECKING:  # Only a type here: importing the builders imports reverb and TensorFlow.
    from rl.agents.builder import ActorLearnerBuilder


CACHE_FLOOR_SECONDS = 0.1
"""Programs compiled faster than this are not written: reading one back would cost about as much."""


def enable_compilation_cache(directory: str | None) -> None:
    """Points JAX's persistent compilation cache at `directory` (None leaves it off). The floor is
    CACHE_FLOOR_SECONDS unless JAX's own JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says otherwise."""
    if not directory:
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    floor = float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", CACHE_FLOOR_SECONDS))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", floor)
    compilation_cache.reset_cache()  # JAX decides at its first compilation whether the cache is used: ask again.


@dataclasses.dataclass
class Experiment:
    """A built experiment: the composed config's live parts (builder, factories, loggers) and its run's
    state (`restore`, `session`), independent of Hydra and of how its nodes are launched; `observers` and
    `evaluator_factories` (None: `build_evaluator`) are factories."""

    builder: ActorLearnerBuilder
    environment_factory: Callable[[int], dm_env.Environment]
    network_factory: Callable[[EnvironmentSpec], Any]
    logger_factory: LoggerFactory
    seed: int = 0
    max_actor_steps: int = 50_000
    eval_every: int = 10_000
    eval_episodes: int = 10
    run_directory: str = "."
    checkpoint: CheckpointSettings | bool = dataclasses.field(default_factory=CheckpointSettings)
    progress: bool = True
    agent_name: str = "agent"
    environment_name: str = "environment"
    learner_log_interval_s: float = 1.0
    observers: Sequence[Callable[..., Any]] = ()
    evaluator_factories: Sequence[Callable[..., Any]] | None = None
    num_envs: int = 1  # Environment copies each actor steps with one batched policy call.
    vector_environment_factory: Callable[..., Any] | None = None
    # What evaluators play where it differs from training's (Atari: the game's own score).
    evaluation_environment_factory: Callable[..., dm_env.Environment] | None = None
    compilation_cache: str | None = None
    composed_config: Mapping[str, Any] | None = None  # The resolved config it was built from (None: built in code).
    threshold: float | None = None  # The evaluation return that solves the task.
    restore: Any = None  # A resumed run's rl.experiments.resume.RestorePoint.
    session: int = 0
    # What a search adds to the run (rl.experiments.hooks.RunHook: Optuna's pruning), called by its lifecycle.
    hooks: Sequence[RunHook] = ()
    _environment_spec: EnvironmentSpec | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        require_positive(self, "max_actor_steps", "eval_every", "eval_episodes", "num_envs")
        if isinstance(self.checkpoint, bool):
            self.checkpoint = CheckpointSettings(enabled=self.checkpoint)

    @property
    def environment_spec(self) -> EnvironmentSpec:
        if self._environment_spec is None:
            environment = self.environment_factory(seed=0)
            self._environment_spec = make_environment_spec(environment)
            environment.close()
        return self._environment_spec
