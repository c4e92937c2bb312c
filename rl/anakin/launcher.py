"""conf/launcher/anakin.yaml: a whole run compiled into one JAX program; what it cannot run is a
ConfigError naming the key, before compiling."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any, Callable

from rl.experiments.replica_plan import MemoryLimits, PopulationSearch, ReplicaPlan
from rl.environments.factories import is_jax_native
from rl.experiments.compiled import derive_settings, make_system, replica_keys, rounded, steps_per_update, system_class
from rl.experiments.config import Experiment
from rl.experiments.launcher import Launcher
from rl.experiments.summary import RunSummary
from rl.experiments.validation import ConfigError
from rl.compat import jax_backends_started

log = logging.getLogger(__name__)

# XLA's previous CPU runtime: much faster on these long `lax.scan`s of small operations (docs/anakin.md) unless each
# device runs many replicas (a grid: docs/performance.md). jaxlib 0.4.32 made the thunk runtime the default; this
# flag picks the previous one up to jaxlib 0.6. jaxlib 0.7.0 and 0.7.1 fail on it ("CpuExecutable has no thunks"),
# later ones ignore it with a warning at every start: they have the thunk runtime only.
PREVIOUS_CPU_RUNTIME = "--xla_cpu_use_thunk_runtime=false"
LAST_JAXLIB_WITH_IT = (0, 6)


def cpu_xla_flags() -> str:
    """The XLA flags an anakin run starts with: the previous CPU runtime where the running jaxlib has it."""
    from jaxlib import version

    release = tuple(int(part) for part in re.findall(r"\d+", version.__version__)[:2])
    return PREVIOUS_CPU_RUNTIME if release <= LAST_JAXLIB_WITH_IT else ""


def set_xla_flags(flags: str | None = None) -> bool:
    """Sets XLA_FLAGS to `flags` (None: `cpu_xla_flags()`) unless they are empty, XLA_FLAGS is set (even
    empty) or a JAX backend has started; says whether it did."""
    flags = cpu_xla_flags() if flags is None else flags
    if not flags or "XLA_FLAGS" in os.environ or jax_backends_started():
        return False
    os.environ["XLA_FLAGS"] = flags
    return True


class AnakinLauncher(Launcher):
    """`num_seeds` replicas in one compiled program (in groups that fit the device's memory: `memory`);
    `steps_per_chunk` updates (null: an evaluation period's) per host call. `pbt`: a population-based
    training's settings file, which `pbt_search` (the search, given as data: conf/launcher/anakin.yaml names
    rl/sweeps/pbt.py's) reads into the population the replicas train as."""

    replay_sized_by_budget = True
    trains_grid_replicas = True

    def __init__(
        self,
        num_seeds: int = 1,
        steps_per_chunk: int | None = None,
        max_replicas_per_program: int | None = None,
        memory_per_device_gb: float | None = None,
        pbt: str | None = None,
        pbt_search: Callable[[str, int], PopulationSearch] | None = None,
    ):
        if isinstance(num_seeds, bool) or not isinstance(num_seeds, int) or num_seeds < 1:
            raise ConfigError(
                "launcher.num_seeds", f"must be an integer >= 1 (replicas trained side by side), got {num_seeds!r}"
            )
        if steps_per_chunk is not None and (isinstance(steps_per_chunk, bool) or steps_per_chunk < 1):
            raise ConfigError("launcher.steps_per_chunk", f"must be an integer >= 1 or null, got {steps_per_chunk!r}")
        if max_replicas_per_program is not None and (
            isinstance(max_replicas_per_program, bool) or max_replicas_per_program < 1
        ):
            raise ConfigError(
                "launcher.max_replicas_per_program",
                f"must be an integer >= 1 or null, got {max_replicas_per_program!r}",
            )
        if memory_per_device_gb is not None and not memory_per_device_gb > 0:
            raise ConfigError("launcher.memory_per_device_gb", f"must be > 0 or null, got {memory_per_device_gb!r}")
        self.num_seeds = num_seeds
        self.steps_per_chunk = steps_per_chunk
        self.memory = MemoryLimits(max_replicas_per_program, memory_per_device_gb)
        self.pbt_file = pbt
        self.pbt = pbt_search(pbt, num_seeds) if pbt is not None and pbt_search is not None else None
        set_xla_flags()  # Made before any program is compiled.

    def fit_experiment(self, experiment: Experiment) -> Experiment:
        """The experiment with the values its system derives, whole updates and chunks, checked."""
        system_class(experiment, "anakin")  # Refuses an agent that names no compiled system.
        experiment = derive_settings(experiment, "anakin", experiment.num_envs)
        per_update = steps_per_update(experiment)
        if self.steps_per_chunk is None:
            whole = f"whole updates of {per_update} environment steps (one chunk each)"
            experiment = dataclasses.replace(
                experiment, eval_every=rounded("anakin", "eval_every", experiment.eval_every, per_update, whole)
            )
        chunk = (self.steps_per_chunk or experiment.eval_every // per_update) * per_update
        budget = rounded(
            "anakin", "max_actor_steps", experiment.max_actor_steps, chunk, f"whole chunks of {chunk} environment steps"
        )
        experiment = dataclasses.replace(experiment, max_actor_steps=budget)
        self.check_experiment(experiment)
        if self.pbt is not None:
            self.pbt.check(experiment)
        return experiment

    def check_experiment(self, experiment: Experiment) -> int:
        """Refuses a (fitted) experiment this launcher cannot run; returns the updates per chunk."""
        if not is_jax_native(experiment.environment_factory):
            raise ConfigError(
                "environment",
                f"launcher=anakin compiles the environment into its program and needs a JAX environment "
                f"(environment=gymnax environment.name=...); '{experiment.environment_name}' is not one",
            )
        if experiment.observers:
            raise ConfigError("observers", "launcher=anakin runs no observers; remove them (observers=[])")
        refusal = system_class(experiment, "anakin").refusal(experiment.builder.config, experiment.num_envs)
        if refusal is not None:
            raise ConfigError(refusal.key, refusal.message)
        per_update = steps_per_update(experiment)
        steps_per_chunk = self.steps_per_chunk or experiment.eval_every // per_update
        if not steps_per_chunk or experiment.max_actor_steps % (steps_per_chunk * per_update):
            raise ConfigError("max_actor_steps", "is not whole chunks of whole updates (see `fit_experiment`)")
        return steps_per_chunk

    def checkpoint_template(self, experiment: Experiment) -> Any:
        """Every replica's training state traced; a CheckpointError when chunks would miss the budget."""
        import jax

        from rl import checkpointing

        latest, _ = checkpointing.find_latest(experiment.run_directory, warn=False)
        chunk_steps = self.check_experiment(experiment) * steps_per_update(experiment)
        steps = checkpointing.step_of(latest) if latest is not None else None
        if steps is not None and (experiment.max_actor_steps - steps) % chunk_steps:
            raise checkpointing.CheckpointError(
                f"the checkpoint is at {steps} actor steps; chunks of {chunk_steps} steps do not reach "
                f"max_actor_steps={experiment.max_actor_steps} from there: resume with the run's own "
                "launcher.steps_per_chunk"
            )
        return jax.eval_shape(jax.vmap(make_system(experiment).init), replica_keys(experiment.seed, self.num_seeds))

    def replica_learners(self, experiment: Experiment, checkpoint: str) -> Any:
        """The agent's learner states (replicas first) in the run's `checkpoint`."""
        from rl.checkpointing import restore_learner_state

        return restore_learner_state(checkpoint, self.checkpoint_template(experiment)).learner

    def __call__(self, experiment: Experiment) -> RunSummary:
        from rl.anakin.driver import AnakinNodes
        from rl.experiments import lifecycle

        if self.pbt_file is not None and self.pbt is None:
            raise ConfigError("launcher.pbt_search", f"is null: nothing reads launcher.pbt={self.pbt_file}")
        plan = ReplicaPlan(self.num_seeds, memory=self.memory, population=self.pbt)
        nodes = AnakinNodes(self.check_experiment(experiment), plan)
        return lifecycle.run(lifecycle.RunContext.make(experiment), nodes, experiment.hooks)
