"""`pruning`: the same Optuna search twice, as a researcher types it, with the median pruner and without."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import yaml

from benchmarks.common import Row, Settings, progress, ratio

N_TRIALS, QUICK_TRIALS = 20, 4
PRUNERS = ("none", "median")  # The reference first.
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
    os.makedirs(sweep)
    environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(settings.train_script)))
    start = time.perf_counter()
    with open(os.path.join(sweep, "benchmark.log"), "w") as log:
        result = subprocess.run(command, cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"the search exited with status {result.returncode}; output in {sweep}/benchmark.log")
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
        found: dict[str, list[dict[str, Any]]] = {pruner: [] for pruner in PRUNERS}
        root = tempfile.mkdtemp(prefix="benchmark-pruning-")
        for repeat in range(settings.repeats):
            for pruner in PRUNERS:
                found[pruner].append(
                    search(settings, preset, pruner, n_trials, os.path.join(root, f"{pruner}_{repeat}"))
                )
        shutil.rmtree(root)
        seconds = {pruner: statistics.median(r["seconds"] for r in found[pruner]) for pruner in PRUNERS}
        best = {
            pruner: statistics.median(r.get("best_value", float("nan")) for r in found[pruner]) for pruner in PRUNERS
        }
        for pruner in PRUNERS:
            pruned = sorted(r["trials"]["pruned"] for r in found[pruner])
            case = f"{preset} {n_trials} trials pruner={pruner}"
            reference = pruner != PRUNERS[0]
            bound = TARGET_RATIO * seconds[PRUNERS[0]] if reference else None
            time_ratio = ratio(seconds[pruner], seconds[PRUNERS[0]]) if reference else None
            rows.append(Row("pruning", f"{case}: wall-clock", seconds[pruner], "s", bound, time_ratio))
            best_ratio = ratio(best[pruner], best[PRUNERS[0]]) if reference else None
            rows.append(Row("pruning", f"{case}: best value", best[pruner], "return", ratio=best_ratio))
            settings.note(f"{case}: trials pruned {pruned} of {n_trials} (per search)")
    return rows
