"""The replicas of a many-seed anakin run: their seeds, keys, run directories and loggers.

Replica i of a run with `seed=s` trains with seed s + i: its key is PRNGKey(s + i), the
key a single-seed run with `seed=s+i` uses, so any replica can be reproduced alone. With
more than one replica, each writes its own run directory `<run dir>/seed_<i>/` (logs,
summary.json) and the run directory holds the mean over replicas. The mean can hide a
replica that never learned, so a run of several ends with `replica_table`'s lines: each
replica's first, best and final evaluation return, flagging those that did not improve.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from rl.experiments.config import ExperimentConfig
from rl.loggers.terminal import format_number


def replica_seeds(seed: int, num_seeds: int) -> list[int]:
    return [seed + i for i in range(num_seeds)]


def replica_keys(seed: int, num_seeds: int) -> jax.Array:
    """(num_seeds, 2) keys: PRNGKey(seed + i) for replica i."""
    return jax.numpy.stack([jax.random.PRNGKey(s) for s in replica_seeds(seed, num_seeds)])


def replica_directory(run_directory: str, index: int) -> str:
    return os.path.join(run_directory, f"seed_{index}")


def replica_experiments(experiment: ExperimentConfig, num_seeds: int) -> list[ExperimentConfig]:
    """One experiment per replica (its seed, run directory and logger factory); a single
    replica is the experiment itself."""
    if num_seeds == 1:
        return [experiment]
    replicas = []
    for index, seed in enumerate(replica_seeds(experiment.seed, num_seeds)):
        directory = replica_directory(experiment.run_directory, index)
        os.makedirs(directory, exist_ok=True)
        replicas.append(
            dataclasses.replace(
                experiment,
                seed=seed,
                run_directory=directory,
                logger_factory=experiment.logger_factory.replica(directory, index, seed),
            )
        )
    return replicas


def take(tree: object, index: int) -> object:
    """Replica `index` of a tree of stacked (host) arrays."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[index], tree)


def improvement_flag(returns: list[float]) -> str:
    """Why a replica's evaluation curve shows no learning, or "" when it does: its best
    return is no better than its first ("never improved"), or it ends no better than it
    began ("final <= first")."""
    if not returns:
        return "not evaluated"
    if max(returns) <= returns[0]:
        return "never improved"
    if returns[-1] <= returns[0]:
        return "final <= first"
    return ""


REPLICA_COLUMNS = ("replica", "seed", "final_eval_return", "best_eval_return", "first_eval_return", "flag")


def replica_table(seeds: list[int], curves: list[list[tuple[int, float]]]) -> list[str]:
    """A header and one line per replica (its index, seed, final, best and first
    evaluation return, and `improvement_flag`), columns aligned: what the mean over
    replicas does not show."""
    rows = []
    for index, (seed, curve) in enumerate(zip(seeds, curves)):
        returns = [float(value) for _, value in curve]
        values = [format_number(v) for v in (returns[-1], max(returns), returns[0])] if returns else ["-"] * 3
        rows.append([str(index), str(seed), *values, improvement_flag(returns)])
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(REPLICA_COLUMNS)]

    def line(cells: list[str]) -> str:
        # Numbers right-aligned; the flag last, left-aligned, so a flagged line stands out.
        numbers = "  ".join(cell.rjust(width) for cell, width in zip(cells[:-1], widths))
        return f"{numbers}  {cells[-1]}".rstrip()

    return [line(list(REPLICA_COLUMNS)), *(line(row) for row in rows)]
