"""A job of a run or a sweep as the entry point and the anakin grid both handle it: the prepared job,
the lines it reports, a refusal that lets a sweep go on, and its end."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

REFUSED_FILE = "refused.txt"  # In a refused sweep job's directory: why it was refused.


@dataclasses.dataclass
class Job:
    """A job ready to train: its experiment (restore point applied), launcher and run directory."""

    experiment: Any
    launch: Any
    output_dir: str
    objective: str


def report(message: str, error: bool = False, transcript: bool = True) -> None:
    """Prints a line for the user (after a multirun job's prefix) and, with `transcript`, copies it into train.log."""
    from rl.loggers.base import JOB_PREFIX, TRANSCRIPT  # Here: a bad command line fails before rich loads.

    print(JOB_PREFIX["text"] + message, file=sys.stderr if error else sys.stdout)
    if transcript:
        TRANSCRIPT.info(message)


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
    return vars(summary)[job.objective]
