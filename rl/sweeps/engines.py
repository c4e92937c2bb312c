"""Where a grid's groups train (hydra/launcher=anakin_grid's `engine`): each group shipped as plain data to a
Ray task or a submitit array task, which runs `worker` on it there; the driver gets each group's values back,
or the one line saying why the group failed. The sweep directory must be on a filesystem every worker sees."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from typing import Any, Callable, Sequence

from rl import compat
from rl.sweeps.jobs import report
from rl.experiments.launcher import ray_cluster_unreachable

# A group's values (one per job), or why it failed on its worker.
Outcome = list[float] | str
Worker = Callable[[Any], list[float]]
# (a group's place, whether its task is done) -> the lines to say about it now (its new evaluation rounds).
Watch = Callable[[int, bool], list[str]]

# A traceback's last line, the exception's: `ValueError: ...`, `jax.errors.SomeError: ...`.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")


def error_line(error: BaseException) -> str:
    """One line about a group's failure on its worker: the last exception line of the traceback an engine's
    error carries, else the error's first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
    if raised:
        return raised[-1]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


@dataclasses.dataclass
class RayEngine:
    """engine=ray: a Ray task per group, asking for `num_cpus`, `num_gpus`, `resources` (e.g. {TPU: 4}) and,
    where set, `accelerator_type`, on the cluster at `address` (None: a Ray instance started here, or the one
    RAY_ADDRESS names). Each task runs in a fresh worker process: its device memory is freed with it."""

    address: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: dict[str, float] = dataclasses.field(default_factory=dict)
    accelerator_type: str | None = None
    connect_timeout_s: float = 10.0

    def problem(self) -> str | None:
        """Why the sweep cannot start (None: it can): a host:port address where nothing answers (`ray.init`
        would wait on it for minutes, after every job was prepared)."""
        unreachable = ray_cluster_unreachable(self.address, self.connect_timeout_s)
        if unreachable is None:
            return None
        return f"hydra.launcher.ray.address: no Ray cluster answers at {self.address} ({unreachable})"

    def run(
        self, worker: Worker, groups: Sequence[Any], names: Sequence[str], watch: Watch | None = None
    ) -> list[Outcome]:
        """Each group's outcome; `watch` is not needed: Ray brings the workers' own lines to this terminal."""
        import ray

        import rl

        compat.drop_ray_token_notice()
        started_here = not ray.is_initialized()
        if started_here:  # The installed `rl` travels to every node, as under launcher=ray.
            runtime_env = {"py_modules": [rl], "env_vars": {"TF_CPP_MIN_LOG_LEVEL": "2", **wandb_settings()}}
            ray.init(address=self.address, runtime_env=runtime_env, logging_level=logging.WARNING)
        references: list[Any] = []
        try:
            self._warn_if_nowhere(ray)
            options = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources)}
            options |= {"accelerator_type": self.accelerator_type} if self.accelerator_type else {}
            task = ray.remote(max_calls=1, max_retries=0, **options)(on_ray_node)
            references = [task.remote(worker, group) for group in groups]
            return [self._outcome(ray, name, reference) for name, reference in zip(names, references)]
        except BaseException:
            for reference in references:  # Interrupted: no group is left running.
                ray.cancel(reference, force=True)
            raise
        finally:
            if started_here:
                ray.shutdown()

    def _outcome(self, ray: Any, name: str, reference: Any) -> Outcome:
        try:
            node, values = ray.get(reference)
        except ray.exceptions.RayTaskError as error:  # The worker's own exception.
            return f"its group {name} failed on its Ray worker: {error_line(error.cause or error)}"
        except ray.exceptions.RayError as error:  # The worker or its node died, the task was cancelled.
            return f"its group {name} failed on its Ray worker: {error_line(error)}"
        report(f"group {name} trained on Ray node {node}", transcript=False)
        return values

    def _warn_if_nowhere(self, ray: Any) -> None:
        """A task no node can take waits forever: said at once (an autoscaling cluster may still add one)."""
        needs = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
        if not any(all(node.get(key, 0) >= amount for key, amount in needs.items() if amount) for node in nodes):
            report(f"Warning: no node of the Ray cluster has what a group asks for ({needs}): groups wait", error=True)


def wandb_settings() -> dict[str, str]:
    """This process's W&B settings (WANDB_MODE, WANDB_PROJECT, ...) for Ray's workers, which do not inherit its
    environment; not its secrets: a worker's machine has its own login."""
    from rl.loggers.wandb import SECRET_ENVIRONMENT_VARIABLES

    return {k: v for k, v in os.environ.items() if k.startswith("WANDB_") and k not in SECRET_ENVIRONMENT_VARIABLES}


def on_ray_node(worker: Worker, group: Any) -> tuple[str, list[float]]:
    """A Ray task: the group's values and the node that trained it."""
    import ray

    return ray.get_runtime_context().get_node_id(), worker(group)


POLL_S = 5.0  # How often engine=submitit looks at its tasks' states and records.


@dataclasses.dataclass
class SubmititEngine:
    """engine=submitit: the groups as one submitit job array, a task per group, on `cluster` (slurm, local:
    subprocesses here, debug: in this process; None: SLURM where there is one). submitit keeps its logs and
    pickles under `folder`; `partition`, `additional_parameters` (sbatch's) and `array_parallelism` are SLURM's."""

    folder: str
    cluster: str | None = None
    partition: str | None = None
    timeout_min: int = 240
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    array_parallelism: int | None = None
    additional_parameters: dict[str, Any] = dataclasses.field(default_factory=dict)

    def problem(self) -> str | None:
        return None  # submitit says itself what it cannot submit.

    def run(
        self, worker: Worker, groups: Sequence[Any], names: Sequence[str], watch: Watch | None = None
    ) -> list[Outcome]:
        """Each group's outcome. A task's lines go to submitit's log of it, so while the tasks run this terminal
        says each group's state when it changes and, every POLL_S seconds, what `watch` reads of its records."""
        import submitit

        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        slurm = {"partition": self.partition, "array_parallelism": self.array_parallelism}
        slurm |= {"additional_parameters": dict(self.additional_parameters)} if self.additional_parameters else {}
        executor.update_parameters(
            name="anakin_grid",
            timeout_min=self.timeout_min,
            gpus_per_node=self.gpus_per_node,
            cpus_per_task=self.cpus_per_task,
            mem_gb=self.mem_gb,
            **{f"slurm_{key}": value for key, value in slurm.items()},
        )
        jobs = executor.map_array(worker, list(groups))
        try:
            for name, job in zip(names, jobs):
                report(f"group {name}: submitit job {job.job_id} ({executor.cluster})", transcript=False)
            if executor.cluster != "debug":  # A debug task runs in this process, when its result is asked for.
                self._watch(jobs, names, watch)
            return [self._outcome(name, job) for name, job in zip(names, jobs)]
        except BaseException:
            for job in jobs:  # Interrupted: no group is left running.
                job.cancel(check=False)
            raise

    def _watch(self, jobs: Sequence[Any], names: Sequence[str], watch: Watch | None) -> None:
        """Until every task is done: a group's state when it changes (pending, running, completed, failed...)
        and its `watch` lines, prefixed with the group as its own lines are."""
        states: list[str | None] = [None] * len(jobs)
        while True:
            done = [job.done() for job in jobs]
            for index, (name, job) in enumerate(zip(names, jobs)):
                state = str(job.state).lower()
                if state != states[index]:
                    states[index] = state
                    report(f"group {name}: {state} (submitit job {job.job_id})", transcript=False)
                for line in watch(index, done[index]) if watch is not None else []:
                    report(f"[group {name}] {line}", transcript=False)
            if all(done):
                return
            time.sleep(POLL_S)

    def _outcome(self, name: str, job: Any) -> Outcome:
        from submitit.core.utils import UncompletedJobError

        try:
            return job.result()
        except UncompletedJobError as error:
            return f"its group {name} failed as submitit job {job.job_id} ({job.paths.stderr}): {error_line(error)}"


ENGINES = {"ray": RayEngine, "submitit": SubmititEngine}


def make_engine(name: str, settings: dict[str, dict[str, Any]]) -> RayEngine | SubmititEngine | None:
    """The engine `name` names with its settings (`settings[name]`); None for local (this process)."""
    if name == "local":
        return None
    if name not in ENGINES:
        raise ValueError(f"hydra.launcher.engine must be local, ray or submitit, got {name!r}")
    return ENGINES[name](**settings.get(name, {}))
