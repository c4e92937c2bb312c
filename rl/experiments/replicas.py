"""Independent replicas of one run trained side by side (launcher=anakin, launcher=sebulba): replica i of
`seed=s` trains as a run with `seed=s+i` and writes `<run dir>/seed_<i>/`; the run's summary says how each
did, with a flag for a replica whose evaluation curve shows no learning."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rl.experiments.config import Experiment
from rl.experiments.summary import read_summary, write_json
from rl.loggers.base import format_number

REPLICA_COLUMNS = ("replica", "seed", "final_eval_return", "best_eval_return", "first_eval_return", "flag")


def seed_replicas(experiment: Experiment, num_seeds: int) -> list[Experiment]:
    """The run itself (one seed), or one experiment per seed in `seed_<index>/`, each with its own logs
    (a restart has moved its rows past the restore point to logs/superseded/: rl.experiments.resume.trim_logs)."""
    if num_seeds == 1:
        return [experiment]
    replicas = []
    for index in range(num_seeds):
        seed = experiment.seed + index
        directory = os.path.join(experiment.run_directory, f"seed_{index}")
        os.makedirs(directory, exist_ok=True)
        factory = experiment.logger_factory.replica(directory, index, seed)
        replicas.append(dataclasses.replace(experiment, seed=seed, run_directory=directory, logger_factory=factory))
    return replicas


def improvement_flag(returns: list[float], threshold: float | None = None) -> str:
    """Why a replica's evaluation curve shows no learning ("" when it does, or ends at `threshold`)."""
    if not returns:
        return "not evaluated"
    if threshold is not None and returns[-1] >= threshold:
        return ""  # Solved, however early (500 at its first round is no failure to improve).
    if max(returns) <= returns[0]:
        return "never improved"
    if returns[-1] <= returns[0]:
        return "final <= first"
    return ""


def replica_table(seeds: list[int], curves: list[list[tuple[int, float]]], threshold: float | None = None) -> list[str]:
    """A header and one aligned line per replica: index, seed, final, best and first return, flag."""
    rows = []
    for index, (seed, curve) in enumerate(zip(seeds, curves)):
        returns = [float(value) for _, value in curve]
        values = [format_number(v) for v in (returns[-1], max(returns), returns[0])] if returns else ["-"] * 3
        rows.append([str(index), str(seed), *values, improvement_flag(returns, threshold)])
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(REPLICA_COLUMNS)]
    line = lambda cells: f"{'  '.join(c.rjust(w) for c, w in zip(cells[:-1], widths))}  {cells[-1]}".rstrip()
    return [line(list(REPLICA_COLUMNS)), *(line(row) for row in rows)]


def add_summary_fields(directory: str, fields: dict[str, Any]) -> None:
    write_json(os.path.join(directory, "summary.json"), read_summary(directory) | fields)
