"""`pruning`: the same Optuna search twice, as a researcher types it, with the median pruner and without."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

import yaml

from benchmarks.common import Row, Settings, progress, ratio, run_logged

N_TRIALS, QUICK_TRIALS = 20, 4
PRUNERS = ("none", "median")  # Each repeat searches without pruning first.
# A tiny search that still prunes: the first trial completes, then the median judges every evaluation.
QUICK = ["max_actor_steps=2000", "eval_every=500", "eval_episodes=2", "agent.min_replay_size=200"]
QUICK_MEDIAN = ["hydra.sweeper.pruner.n_startup_trials=1"]
TARGET_RATIO = 0.7  # Issue 22: at most 0.7 of the unpruned search's wall-clock, a best trial at least as good.


def search(settings: Settings, preset: str, pruner: str, n_trials: int, sweep: str) -> dict[str, Any]:
    """Wall-clock seconds and optimization_results.yaml of one `scripts/train.py -m` search into `sweep`."""
    command = [sys.executable, settings.train_script, "-m", f"experiment={preset}", "hydra/sweeper=dqn_optuna"]
    command += [f"hydra/sweeper/pruner={pruner}", f"hydra.sweeper.n_trials={n_trials}", "logger=csv"]
    if settings.quick:
        command += QUICK + (QUICK_MEDIAN if pruner == "median" else [])
    command += ["progress=false", f"hydra.sweep.dir={sweep}"]
    progress(f"searching: {' '.join(command[2:])}")
    seconds = run_logged(command, sweep)
    with open(os.path.join(sweep, "optimization_results.yaml")) as file:
        return {"seconds": seconds, **yaml.safe_load(file)}


def suite_pruning(settings: Settings) -> list[Row]:
    """wall-clock of a 20-trial Optuna search (hydra/sweeper=dqn_optuna, experiment dqn_cartpole unless
    --experiments) with hydra/sweeper/pruner=median and with none, and each one's best value. ratio: to the
    search without pruning (bound: 0.7 of its time). One search of each per --repeats (use --repeats 1:
    a search is long); --quick: 4 trials of 2,000 steps."""
    rows: list[Row] = []
    n_trials = QUICK_TRIALS if settings.quick else N_TRIALS
    for preset in settings.experiments or ("dqn_cartpole",):
        root = tempfile.mkdtemp(prefix="benchmark-pruning-")
        runs = [(pruner, repeat) for repeat in range(settings.repeats) for pruner in PRUNERS]  # Alternating.
        found = [(p, search(settings, preset, p, n_trials, os.path.join(root, f"{p}_{r}"))) for p, r in runs]
        shutil.rmtree(root)
        seconds, best, case = {}, {}, f"{preset} {n_trials} trials pruner="
        for pruner in PRUNERS:
            searches = [result for p, result in found if p == pruner]
            seconds[pruner] = statistics.median(r["seconds"] for r in searches)
            best[pruner] = statistics.median(r.get("best_value", float("nan")) for r in searches)
            pruned = sorted(r["trials"]["pruned"] for r in searches)
            settings.note(f"{case}{pruner}: trials pruned {pruned} of {n_trials} (per search)")
        bound, time_ratio = TARGET_RATIO * seconds["none"], ratio(seconds["median"], seconds["none"])
        rows += [
            Row("pruning", f"{case}none: wall-clock", seconds["none"], "s"),
            Row("pruning", f"{case}none: best value", best["none"], "return"),
            Row("pruning", f"{case}median: wall-clock", seconds["median"], "s", bound, time_ratio),
            Row(
                "pruning",
                f"{case}median: best value",
                best["median"],
                "return",
                ratio=ratio(best["median"], best["none"]),
            ),
        ]
    return rows
