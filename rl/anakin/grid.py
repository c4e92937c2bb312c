"""hydra/launcher=anakin_grid: a multirun's launcher=anakin jobs that differ only in the seed and in
float settings of `agent` or `policy` train as the replicas of one compiled program (a group); jobs
that differ in anything else form other groups. Every job keeps its run directory, records and value."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from rl.anakin.build import untraceable, value_of
from rl.anakin.launcher import AnakinLauncher
from rl.checkpointing import flatten_mapping
from rl.experiments.jobs import Job, finish_job, refuse_job, report
from rl.loggers.base import JOB_PREFIX, TRANSCRIPT

log = logging.getLogger(__name__)

BATCHED_GROUPS = ("agent", "policy")  # Their float settings can be one value per replica.
# Settings only a job's own records read: jobs that differ in them still share a program.
RECORD_KEYS = ("seed", "logger", "objective", "threshold", "progress", "checkpoint", "resume", "compilation_cache")
GROUPS_DIRECTORY = ".grid"  # Under the sweep directory: each group's own records (the replicas' mean).


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
    handlers, old_prefix = TRANSCRIPT.handlers[:], JOB_PREFIX["text"]
    handler = logging.FileHandler(path)
    handler.setFormatter(handlers[0].formatter if handlers else None)
    TRANSCRIPT.handlers, JOB_PREFIX["text"] = [handler], prefix
    try:
        yield
    finally:
        handler.close()
        TRANSCRIPT.handlers, JOB_PREFIX["text"] = handlers, old_prefix


@dataclasses.dataclass
class GridJob:
    """A prepared job of the sweep: its number, Hydra's result (its value set once trained), train.log."""

    number: int
    result: JobReturn
    job: Job
    log_file: str


def refusal(job: Any) -> str | None:
    """Why a prepared job cannot be a grid replica (None: it can)."""
    launch = job.launch
    if not isinstance(launch, AnakinLauncher):
        return "hydra/launcher=anakin_grid trains launcher=anakin jobs; this job's launcher is another"
    if launch.num_seeds != 1:
        return "hydra/launcher=anakin_grid: launcher.num_seeds must be 1 (sweep seed=0,1,... instead)"
    if job.experiment.restore is not None:
        return (
            "hydra/launcher=anakin_grid starts jobs from scratch; this job's directory holds a checkpoint: "
            f"resume it on its own (python scripts/train.py resume={job.output_dir})"
        )
    return None


def run_group(jobs: list[GridJob], batched: list[str], directory: str) -> list[float]:
    """Trains `jobs` as the replicas of one program; each job's value (NaN for a failed replica). In a
    search that prunes, each evaluation is reported to the job's trial and a pruned replica is masked."""
    from rl.anakin.driver import AnakinNodes
    from rl.experiments import lifecycle
    from rl.experiments.pruning import OptunaTrial
    from rl.loggers import DefaultLoggerFactory

    experiments = [grid_job.job.experiment for grid_job in jobs]
    for experiment in experiments:
        factory = experiment.logger_factory
        if isinstance(factory, DefaultLoggerFactory):
            factory.terminal = False  # The group's terminal shows their mean; each job's own logs stay.
            if factory.wandb_run is not None:
                factory.wandb_run.reinit = "create_new"  # The jobs' W&B runs are open together.
        factory.start()
    values = {key: np.asarray([value_of(e, key) for e in experiments], np.float32) for key in batched}
    jobs_text = ", ".join(str(grid_job.number) for grid_job in jobs)
    fields = {"launcher": "anakin", "num_seeds": 1, "grid": {"group": directory, "jobs": len(jobs), "batched": batched}}
    records = DefaultLoggerFactory(directory=os.path.join(directory, "logs"))
    group = dataclasses.replace(experiments[0], run_directory=directory, logger_factory=records, checkpoint=False)
    os.makedirs(directory, exist_ok=True)
    trials = [OptunaTrial.from_environment(j.job.output_dir, dict(j.result.hydra_cfg.hydra.job.env_set)) for j in jobs]
    launch = jobs[0].job.launch
    nodes = AnakinNodes(1, launch.check_experiment(group), experiments, values, fields, trials, launch.memory)
    with transcript_to(os.path.join(directory, "train.log"), f"[group {os.path.basename(directory)}] "):
        report(
            f"jobs {jobs_text} in one program, batching {', '.join(batched) or 'seeds only'}; records in {directory}"
        )
        try:
            lifecycle.run(group, nodes)
        except lifecycle.RunInterrupted as stop:
            report(
                f"Interrupted: {stop}; the grid's jobs keep no checkpoint: the same command starts them over",
                error=True,
            )
            sys.exit(stop.exit_code)
    results = []
    for grid_job, summary, ended in zip(jobs, nodes.replica_summaries, nodes.ended):
        with transcript_to(grid_job.log_file, f"[job {grid_job.number}] "):
            if ended and ended[0] == "failed":
                report(f"Run failed: numerical fault: {ended[1]}", error=True)
                results.append(float("nan"))
            else:
                results.append(finish_job(grid_job.job, summary))
    return results


def launch(
    hydra_context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    prepare_job: Callable[[DictConfig], Job | float],
) -> list[JobReturn]:
    """Prepares every job with `prepare_job` (the entry point's first half) as Hydra's own launchers run
    one (its directory, .hydra/, train.log), then trains each group; returns each job's result with the
    value its run returns."""
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_directory = os.path.abspath(str(config.hydra.sweep.dir))
    os.makedirs(sweep_directory, exist_ok=True)
    log.info("anakin_grid: preparing %d jobs in %s", len(job_overrides), sweep_directory)
    for number, overrides in enumerate(job_overrides, initial_job_idx):
        log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
    results, prepared = [], []
    for number, overrides in enumerate(job_overrides, initial_job_idx):
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id, sweep_config.hydra.job.num = f"{sweep_config.hydra.job.name}_{number}", number
        result = run_job(
            hydra_context=hydra_context,
            task_function=prepare_job,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        results.append(result)
        if result.status == JobStatus.COMPLETED and isinstance(result.return_value, Job):
            job = result.return_value
            log_file = os.path.join(job.output_dir, f"{sweep_config.hydra.job.name}.log")
            reason = refusal(job)
            if reason is None:
                prepared.append(GridJob(number, result, job, log_file))
                continue
            with transcript_to(log_file, f"[job {number}] "):
                result.return_value = refuse_job(job.output_dir, f"Invalid configuration: {reason}")
    configs = [OmegaConf.to_container(grid_job.result.cfg, resolve=True) for grid_job in prepared]
    for group_number, (members, batched) in enumerate(group_jobs(configs)):
        experiments = [prepared[i].job.experiment for i in members]
        for part, (inner, keys) in enumerate(split_structural(experiments, batched)):
            jobs = [prepared[members[i]] for i in inner]
            name = f"{prepared[members[0]].number}_{group_number}_{part}"
            values = run_group(jobs, keys, os.path.join(sweep_directory, GROUPS_DIRECTORY, name))
            for grid_job, value in zip(jobs, values):
                grid_job.result.return_value = value
    return results
