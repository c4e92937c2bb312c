"""Hydra's callback for a multirun of rl/train.py (conf/hydra/job_logging/rl.yaml names it): a warning when an
Optuna search samples only at random, and at the sweep's end its results and the jobs it refused."""

from __future__ import annotations

import os
import sys

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rl.sweeps.jobs import REFUSED_FILE


class SweepReport(Callback):
    """At the end of a multirun: `<sweep dir>/results.yaml` ranks the sweep's settings by their mean objective
    over seeds (rl.sweeps.results) and maps every job to its directory, overrides and value; the
    jobs refused before they started are listed (each one's `REFUSED_FILE`), exit status 2."""

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        sweeper = config.hydra.sweeper
        startup = (sweeper.get("sampler") or {}).get("n_startup_trials")
        if "optuna" in str(sweeper.get("_target_", "")).lower() and startup and sweeper.n_trials <= startup:
            print(
                f"Warning: hydra.sweeper.n_trials={sweeper.n_trials} is within the sampler's n_startup_trials={startup}: "
                "every trial is sampled at random",
                file=sys.stderr,
            )

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        from rl.sweeps.results import read_sweep, write_results

        sweep = os.path.abspath(str(config.hydra.sweep.dir))
        jobs = read_sweep(sweep, config.get("objective", "final_eval_return"), REFUSED_FILE)
        maximize = not str(config.hydra.sweeper.get("direction", "maximize")).startswith("min")
        for line in write_results(sweep, jobs, maximize):
            print(line)
        refused = jobs.refused
        if refused:
            lines = [f"  {job}: {reason}" for job, reason in refused.items()]
            print(f"{len(refused)} job(s) of the sweep in {sweep} were refused:", *lines, sep="\n", file=sys.stderr)
            sys.exit(2)
