"""hydra/launcher=anakin_grid: a multirun's launcher=anakin jobs that differ only in the seed and in
float settings of `agent` or `policy` train as the replicas of one compiled program (a group); jobs
that differ in anything else form other groups. Every job keeps its run directory, records and value."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import sys
from typing import Any, Callable, Iterator, NoReturn, Sequence

import numpy as np
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from rl.anakin.build import untraceable, value_of
from rl.sweeps.engines import Outcome, RayEngine, SubmititEngine
from rl.checkpointing import flatten_mapping
from rl.sweeps.jobs import (
    Job,
    JobSpec,
    Refusal,
    RunRefused,
    finish_job,
    rebuild_job,
    refuse_job,
    remove_hydra_files,
    report,
)
from rl.sweeps.progress import RecordsProgress, SettingsProgress, settings_of_group
from rl.loggers.base import TRANSCRIPT, console_prefixed

log = logging.getLogger(__name__)

BATCHED_GROUPS = ("agent", "policy")  # Their float settings can be one value per replica.
# Settings only a job's own records read: jobs that differ in them still share a program.
RECORD_KEYS = ("seed", "logger", "objective", "threshold", "progress", "checkpoint", "resume", "compilation_cache")
GROUPS_DIRECTORY = ".grid"  # Under the sweep directory: each group's own records (the replicas' mean).
MULTIRUN_FILE = "multirun.yaml"  # Hydra's sweeper writes it in the sweep directory before the launcher runs.
Engine = RayEngine | SubmititEngine  # Where groups train other than here (rl/sweeps/engines.py).


def group_jobs(configs: Sequence[dict[str, Any]]) -> list[tuple[list[int], list[str]]]:
    """(job indices, the keys the group batches) of each group: jobs equal but in their seed, records and
    the float values of agent/policy keys; a group batches the keys whose values differ in it."""
    flat = [flatten_mapping(config) for config in configs]
    floats = lambda key: all(type(values.get(key)) is float for values in flat)
    batchable = {key for key in set().union(*flat) if key.split(".")[0] in BATCHED_GROUPS and floats(key)}
    groups: dict[str, list[int]] = {}
    for index, values in enumerate(flat):
        kept = [(key, repr(value)) for key, value in values.items() if key not in batchable]
        signature = repr(sorted(item for item in kept if item[0].split(".")[0] not in RECORD_KEYS))
        groups.setdefault(signature, []).append(index)
    varying = lambda members: sorted(key for key in batchable if len({flat[i][key] for i in members}) > 1)
    return [(members, varying(members)) for members in groups.values()]


def split_structural(experiments: Sequence[Any], varying: list[str]) -> list[tuple[list[int], list[str]]]:
    """The group as one program when its varying keys trace; otherwise split by the keys that do not."""
    lead = experiments[0]
    reasons = {key: "not a field of the agent's config" for key in varying if value_of(lead, key) is None}
    if varying and not reasons and untraceable(lead, varying):
        reasons = {key: why for key in varying if (why := untraceable(lead, [key]))}
        reasons = reasons or {key: "only together with the others" for key in varying}
    for key, why in reasons.items():
        log.warning(
            "hydra/launcher=anakin_grid: %s cannot be a per-replica value (%s): one program per value", key, why
        )
    parts: dict[tuple, list[int]] = {}
    for index, experiment in enumerate(experiments):
        parts.setdefault(tuple(repr(value_of(experiment, key)) for key in reasons), []).append(index)
    batched = [key for key in varying if key not in reasons]
    return [(members, batched) for members in parts.values()]


@contextlib.contextmanager
def transcript_to(path: str, prefix: str) -> Iterator[None]:
    """While open, terminal lines start with `prefix` and train.log's copy goes to `path`."""
    handlers = TRANSCRIPT.handlers[:]
    handler = logging.FileHandler(path)
    handler.setFormatter(handlers[0].formatter if handlers else None)
    TRANSCRIPT.handlers = [handler]
    try:
        with console_prefixed(prefix):
            yield
    finally:
        handler.close()
        TRANSCRIPT.handlers = handlers


@dataclasses.dataclass
class GridJob:
    """A prepared job of the sweep: its number, the job, its train.log and Hydra's `env_set` (a trial's)."""

    number: int
    job: Job
    log_file: str
    env_set: dict[str, str]


@dataclasses.dataclass
class GroupPlan:
    """A group as the driver forms it: its records' directory, jobs and the keys its program batches."""

    directory: str
    jobs: list[GridJob]
    batched: list[str]


@dataclasses.dataclass
class ShippedJob:
    """A grid job as plain data: what a worker needs to build it again (`rebuild_job`) and to write its log."""

    number: int
    log_file: str
    env_set: dict[str, str]
    spec: JobSpec


@dataclasses.dataclass
class ShippedGroup:
    """A group as plain data for a worker (a Ray task, a submitit array task): its records' directory, the keys
    its program batches, its jobs, the CPU devices to shard over (None: the worker's cores), and the Python
    logging its first job ran with here (Hydra's job_logging: the terminal, train.log, the transcript's level)."""

    directory: str
    batched: list[str]
    jobs: list[ShippedJob]
    host_devices: int | None
    job_logging: dict[str, Any]


def refusal(launch: Any, restore: Any, output_dir: str) -> str | None:
    """Why a job (its launcher, restore point and run directory) cannot be a grid replica (None: it can); asked
    while the job is prepared, before its run directory is written (a `JobCheck`)."""
    if not launch.trains_grid_replicas:
        return "hydra/launcher=anakin_grid trains launcher=anakin jobs; this job's launcher is another"
    if launch.num_seeds != 1:
        return "hydra/launcher=anakin_grid: launcher.num_seeds must be 1 (sweep seed=0,1,... instead)"
    if restore is not None:
        return (
            "hydra/launcher=anakin_grid starts jobs from scratch; this job's directory holds a checkpoint: "
            f"resume it on its own (python scripts/train.py resume={output_dir})"
        )
    return None


def replica_hooks(
    jobs: list[GridJob], batched: list[str], budget: int
) -> tuple[tuple[tuple[Any, ...], ...], SettingsProgress | None]:
    """Each replica's hooks: its job's trial in a search that prunes and, where the group batches settings, its
    teller of each setting's line (first: told even of the round that prunes it); and those lines' collector."""
    from rl.sweeps.pruning import PruningHook

    experiments = [grid_job.job.experiment for grid_job in jobs]
    settings = settings_of_group(experiments, [grid_job.number for grid_job in jobs], batched)
    lines = SettingsProgress(settings, budget, report) if batched else None
    hooks = []
    for index, grid_job in enumerate(jobs):
        trial = PruningHook.from_environment(grid_job.job.output_dir, grid_job.env_set)
        teller = (lines.hook(index),) if lines is not None else ()
        hooks.append((*teller, *(() if trial is None else (trial,))))
    return tuple(hooks), lines


def group_experiment(lead: Any, directory: str, batched: list[str]) -> Any:
    """The group's own run: its records (the replicas' mean) under `directory`, no checkpoint. Where its replicas
    differ in settings that mean is no setting's: no terminal lines of it and no progress bar (which shows it),
    each setting's lines instead (`replica_hooks`)."""
    from rl.loggers import DefaultLoggerFactory

    records = DefaultLoggerFactory(directory=os.path.join(directory, "logs"), terminal=not batched)
    shown = lead.progress and not batched
    return dataclasses.replace(lead, run_directory=directory, logger_factory=records, checkpoint=False, progress=shown)


def run_group(jobs: list[GridJob], batched: list[str], directory: str) -> list[float]:
    """Trains `jobs` as the replicas of one program; each job's value (NaN for a failed replica). In a
    search that prunes, each job's trial is its replica's hook: told each evaluation, it masks a pruned replica."""
    from rl.anakin.driver import AnakinNodes
    from rl.experiments.replica_plan import ReplicaPlan
    from rl.experiments import lifecycle, signals
    from rl.loggers import DefaultLoggerFactory

    experiments = [grid_job.job.experiment for grid_job in jobs]
    for experiment in experiments:
        factory = experiment.logger_factory
        if isinstance(factory, DefaultLoggerFactory):
            factory.terminal = False  # The group's terminal shows its settings' lines; each job's logs stay.
            if factory.wandb_run is not None:
                factory.wandb_run.reinit = "create_new"  # The jobs' W&B runs are open together.
        factory.start()
    from rl.experiments.resume import trim_logs

    # The group's own records (the jobs' mean) of an earlier attempt go aside: its jobs start over.
    trim_logs(directory, max(experiment.session for experiment in experiments))
    values = {key: np.asarray([value_of(e, key) for e in experiments], np.float32) for key in batched}
    jobs_text = ", ".join(str(grid_job.number) for grid_job in jobs)
    fields = {"launcher": "anakin", "num_seeds": 1, "grid": {"group": directory, "jobs": len(jobs), "batched": batched}}
    group = group_experiment(experiments[0], directory, batched)
    os.makedirs(directory, exist_ok=True)
    hooks, lines = replica_hooks(jobs, batched, group.max_actor_steps)
    launch = jobs[0].job.launch
    plan = ReplicaPlan(
        replicas=tuple(experiments),
        hyperparameters=values,
        summary_fields=fields,
        replica_hooks=hooks,
        memory=launch.memory,
        replica_checkpoints=True,  # scripts/evaluate.py evaluates (and films) a finished job.
    )
    nodes = AnakinNodes(launch.check_experiment(group), plan)
    with transcript_to(os.path.join(directory, "train.log"), f"[group {os.path.basename(directory)}] "):
        report(
            f"jobs {jobs_text} in one program, batching {', '.join(batched) or 'seeds only'}; records in {directory}"
        )
        try:
            lifecycle.run(lifecycle.RunContext.make(group), nodes, group.hooks)
            if lines is not None:
                lines.flush()
        except signals.RunInterrupted as stop:
            report(
                f"Interrupted: {stop}; a grid job keeps a checkpoint once it finishes: the same command starts "
                "these over",
                error=True,
            )
            sys.exit(stop.exit_code)
    results = []
    for grid_job, summary, ended in zip(jobs, nodes.replicas.summaries, nodes.replicas.ended):
        with transcript_to(grid_job.log_file, f"[job {grid_job.number}] "):
            if ended and ended[0] == "failed":
                report(f"Run failed: numerical fault: {ended[1]}", error=True)
                results.append(float("nan"))
            else:
                results.append(finish_job(grid_job.job, summary))
    return results


def run_shipped_group(group: ShippedGroup) -> list[float]:
    """On a worker: the group's jobs built again from their configs (their directories were prepared by the
    driver), trained as one program by `run_group`; each job's value."""
    from rl.anakin.launcher import set_xla_flags

    set_xla_flags(f"--xla_force_host_platform_device_count={group.host_devices or os.cpu_count() or 1}")
    configure_log(OmegaConf.create(group.job_logging))
    logging.disable(logging.WARNING)  # What building a job warns about, the driver said when it prepared it.
    try:
        jobs = [GridJob(job.number, rebuild_job(job.spec), job.log_file, job.env_set) for job in group.jobs]
    finally:
        logging.disable(logging.NOTSET)
    return run_group(jobs, group.batched, group.directory)


def ship(
    group: GroupPlan, results: dict[int, JobReturn], configs: dict[int, dict[str, Any]], host_devices: int | None
) -> ShippedGroup:
    """`group` as plain data: each job's resolved config and what `prepare_job` built it with (Hydra's choices,
    its W&B group, tags and name), so that a worker builds the same experiments."""
    from rl.experiments.make_experiment import tracking_settings

    jobs = []
    for grid_job in group.jobs:
        result = results[grid_job.number]
        job = grid_job.job
        hydra_config = result.hydra_cfg.hydra
        tracking = tracking_settings(hydra_config, result.cfg)
        wandb_run = job.experiment.logger_factory.wandb_run
        tracking["run_name"] = wandb_run.name if wandb_run is not None else None
        choices = OmegaConf.to_container(hydra_config.runtime.choices)
        spec = JobSpec(configs[grid_job.number], choices, job.output_dir, job.objective, tracking)
        jobs.append(ShippedJob(grid_job.number, grid_job.log_file, grid_job.env_set, spec))
    job_logging = OmegaConf.to_container(results[group.jobs[0].number].hydra_cfg.hydra.job_logging, resolve=True)
    return ShippedGroup(group.directory, group.batched, jobs, host_devices, job_logging)


def watch_records(group: GroupPlan) -> RecordsProgress:
    """The group's lines read from its jobs' records while a worker trains it (each setting's, as here)."""
    experiments = [grid_job.job.experiment for grid_job in group.jobs]
    settings = settings_of_group(experiments, [grid_job.number for grid_job in group.jobs], group.batched)
    directories = [grid_job.job.output_dir for grid_job in group.jobs]
    return RecordsProgress(settings, experiments[0].max_actor_steps, directories)


def fail_group(group: GroupPlan, why: str) -> list[float]:
    """A group that failed on its worker: each job's log says why and its summary.json (where the worker
    wrote none) has status `failed`; NaN for each, and the sweep goes on."""
    from rl.experiments.summary import RunSummary, write_json

    for grid_job in group.jobs:
        with transcript_to(grid_job.log_file, f"[job {grid_job.number}] "):
            report(f"Run failed: {why}", error=True)
        path = os.path.join(grid_job.job.output_dir, "summary.json")
        if not os.path.isfile(path):
            summary = RunSummary.from_run(grid_job.job.experiment, {}, [], 0.0, status="failed")
            grid = {"group": group.directory, "jobs": len(group.jobs), "batched": group.batched}
            write_json(path, dataclasses.asdict(summary) | {"failure": why, "grid": grid})
    return [float("nan")] * len(group.jobs)


def prepare_jobs(
    hydra_context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    prepare_job: Callable[..., Job | float | Refusal],
) -> tuple[list[JobReturn], list[GridJob]]:
    """Every job prepared with `prepare_job` (the entry point's first half), refusing what a grid cannot train
    (`refusal`) and handing back each refused job's `Refusal` unannounced, as Hydra's own launchers run one (its
    directory, .hydra/, train.log): Hydra's results, and the jobs a grid can train. The refused jobs are then
    announced each (the sweep goes on) or, when every job of a sweep's first launch is refused for one reason, the
    sweep is refused once (`refuse_sweep`)."""
    prepare = functools.partial(prepare_job, announce=False, refuse=refusal)
    results = []
    prepared = []
    refused: list[tuple[int, Refusal]] = []  # (number, refusal) of each refused job.
    sweep_directory = os.path.abspath(str(config.hydra.sweep.dir))
    log_name = f"{config.hydra.job.name}.log"  # Each job's train.log, as Hydra's job logging names it.
    for number, overrides in enumerate(job_overrides, initial_job_idx):
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{number}"
            sweep_config.hydra.job.num = number
        result = run_job(
            hydra_context=hydra_context,
            task_function=prepare,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        results.append(result)
        if result.status != JobStatus.COMPLETED:
            continue
        job = result.return_value
        if isinstance(job, Refusal):
            refused.append((number, job))
        elif isinstance(job, Job):
            log_file = os.path.join(job.output_dir, log_name)
            prepared.append(GridJob(number, job, log_file, dict(result.hydra_cfg.hydra.job.env_set)))
    # A search's later launch (Optuna's next trials) is part of a sweep that already ran jobs: only a first one
    # can be the whole sweep.
    whole_sweep = initial_job_idx == 0 and len(refused) == len(results)
    if whole_sweep and len({refused_job.reason for _, refused_job in refused}) == 1:
        refuse_sweep([refused_job for _, refused_job in refused], log_name, sweep_directory)
    for number, refused_job in refused:
        with transcript_to(os.path.join(refused_job.output_dir, log_name), f"[job {number}] "):
            results[number - initial_job_idx].return_value = refuse_job(refused_job.output_dir, refused_job.reason)
    return results, prepared


def refuse_sweep(refusals: list[Refusal], log_name: str, sweep_directory: str) -> NoReturn:
    """A sweep whose every job was refused for one reason: one line, and nothing left of it (what Hydra wrote
    for its jobs, and multirun.yaml, which Hydra wrote for this command), save a directory that holds a run or
    anything else; the command line then removes the directories left empty (`RunRefused`)."""
    for refused_job in refusals:
        remove_hydra_files(refused_job.output_dir, log_name)
        with contextlib.suppress(OSError):  # Not empty: it holds a run, or held something before.
            os.rmdir(refused_job.output_dir)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(sweep_directory, MULTIRUN_FILE))
    report(refusals[0].reason, error=True, transcript=False)
    raise RunRefused(refusals[0].code, sweep_directory)


def plan_groups(prepared: list[GridJob], configs: list[dict[str, Any]], sweep_directory: str) -> list[GroupPlan]:
    """The groups of the prepared jobs (`group_jobs`, then `split_structural`), each with its directory."""
    plans = []
    for group_number, (members, batched) in enumerate(group_jobs(configs)):
        experiments = [prepared[i].job.experiment for i in members]
        for part, (inner, keys) in enumerate(split_structural(experiments, batched)):
            name = f"{prepared[members[0]].number}_{group_number}_{part}"
            jobs = [prepared[members[i]] for i in inner]
            plans.append(GroupPlan(os.path.join(sweep_directory, GROUPS_DIRECTORY, name), jobs, keys))
    return plans


def launch(
    hydra_context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    prepare_job: Callable[..., Job | float | Refusal],
    engine: Engine | None = None,
    host_devices: int | None = None,
) -> list[JobReturn]:
    """Prepares every job here, then trains each group here one after another (`engine` None) or on the
    engine's workers, `host_devices` CPU devices each (None: a worker's cores); returns each job's result
    with the value its run returns."""
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_directory = os.path.abspath(str(config.hydra.sweep.dir))
    os.makedirs(sweep_directory, exist_ok=True)
    log.info("anakin_grid: preparing %d jobs in %s", len(job_overrides), sweep_directory)
    for number, overrides in enumerate(job_overrides, initial_job_idx):
        log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
    results, prepared = prepare_jobs(hydra_context, config, job_overrides, initial_job_idx, prepare_job)
    by_number = {number: result for number, result in enumerate(results, initial_job_idx)}
    configs = {job.number: OmegaConf.to_container(by_number[job.number].cfg, resolve=True) for job in prepared}
    groups = plan_groups(prepared, list(configs.values()), sweep_directory)
    if engine is None:
        outcomes: list[Outcome] = [run_group(group.jobs, group.batched, group.directory) for group in groups]
    else:
        shipped = [ship(group, by_number, configs, host_devices) for group in groups]
        watched = [watch_records(group) for group in groups]
        names = [os.path.basename(group.directory) for group in groups]
        outcomes = engine.run(run_shipped_group, shipped, names, lambda index, done: watched[index].new_lines(done))
    for group, outcome in zip(groups, outcomes):
        values = fail_group(group, outcome) if isinstance(outcome, str) else outcome
        for grid_job, value in zip(group.jobs, values):
            by_number[grid_job.number].return_value = value
    return results
