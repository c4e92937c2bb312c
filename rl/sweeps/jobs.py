"""A job of a run or a sweep as the entry point and the anakin grid both handle it: the prepared job,
the lines it reports, a refusal that lets a sweep go on (or, for a run, ends it), and its end."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from typing import Any, Callable

REFUSED_FILE = "refused.txt"  # In a refused sweep job's directory: why it was refused.


class RunRefused(SystemExit):
    """A single run, or a sweep whose every job was refused for one reason, refused before it started (exit
    status `code`): the command line (rl.train.cli) then takes back the directories Hydra made for
    `run_directory` (the run's, or the sweep's)."""

    def __init__(self, code: int, run_directory: str):
        super().__init__(code)
        self.run_directory = run_directory


@dataclasses.dataclass
class Job:
    """A job ready to train: its experiment (restore point applied), launcher and run directory."""

    experiment: Any
    launch: Any
    output_dir: str
    objective: str


@dataclasses.dataclass
class JobSpec:
    """A prepared job as plain data, for another process to build the same job again (a grid's worker): its
    resolved config, Hydra's config-group choices, run directory, objective and `make_experiment`'s W&B
    naming (`run_group`, `run_tags`, `job_number`, `run_name`)."""

    config: dict[str, Any]
    choices: dict[str, Any]
    output_dir: str
    objective: str
    tracking: dict[str, Any]


def rebuild_job(spec: JobSpec) -> Job:
    """The job `spec` describes, built from its config as the process that prepared it built it, in the
    session that process opened (its directory is not prepared again: nothing is written)."""
    from omegaconf import OmegaConf

    from rl.experiments.make_experiment import make_experiment
    from rl.experiments.resume import rejoin_session

    config = OmegaConf.create(spec.config)
    experiment, launch = make_experiment(config, spec.output_dir, spec.choices, **spec.tracking)
    return Job(rejoin_session(experiment, spec.output_dir), launch, spec.output_dir, spec.objective)


def report(message: str, error: bool = False, transcript: bool = True) -> None:
    """Prints a line for the user (after a multirun job's prefix) and, with `transcript`, copies it into train.log."""
    from rl.loggers.base import TRANSCRIPT, console_prefix  # Here: a bad command line fails before rich loads.

    print(console_prefix() + message, file=sys.stderr if error else sys.stdout)
    if transcript:
        TRANSCRIPT.info(message)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A sweep job refused before it trained, not announced yet (the anakin grid announces its refusals
    together): its directory, the line that says why and the exit status a refused run has."""

    output_dir: str
    reason: str
    code: int


# What a launcher that prepares jobs cannot train, from the job's launcher, restore point and run directory:
# why, in one line (None: it can). hydra/launcher=anakin_grid's is rl/sweeps/grid.py's `refusal`.
JobCheck = Callable[[Any, Any, str], "str | None"]


def remove_hydra_files(output_dir: str, log_name: str) -> None:
    """After a refused command: what Hydra wrote for it (`.hydra/`, an empty job log), unless the directory
    holds a run. The directories Hydra made are left to rl.train's `remove_empty_directories`."""
    from rl.checkpointing import holds_a_run

    if holds_a_run(output_dir):
        return
    shutil.rmtree(os.path.join(output_dir, ".hydra"), ignore_errors=True)
    log = os.path.join(output_dir, log_name)
    if os.path.isfile(log) and os.path.getsize(log) == 0:
        os.remove(log)


def refuse_job(output_dir: str, reason: str) -> float:
    """One refused job of a sweep: the sweep goes on; `SweepReport` lists the refusals at its end."""
    report(reason, error=True)
    with open(os.path.join(output_dir, REFUSED_FILE), "w") as file:
        file.write(f"{reason}\n")
    return float("nan")


def shown_path(path: str) -> str:
    """`path` as a reader would type it: relative to the working directory when it lies under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def finish_job(job: Job, summary: Any) -> float:
    """After training: the loggers closed, the result line, the value a sweeper optimises."""
    from rl.experiments.summary import close_loggers

    close_loggers(job.experiment, exit_code=0)
    ended = "pruned by the search: last" if summary.status == "pruned" else "final"
    report(
        f"{ended} evaluation return {summary.final_eval_return:.1f} after {summary.actor_steps} actor steps "
        f"({summary.wall_time_s:.0f} s); summary in {shown_path(job.output_dir)}/summary.json"
    )
    return summary.objective(job.objective)
