"""Hydra's callback for a multirun of rl/train.py (conf/hydra/job_logging/rl.yaml names it): a warning when an
Optuna search samples only at random, and at the sweep's end its results and the jobs it refused."""

from __future__ import annotations

import os
import sys

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rl.sweeps.jobs import REFUSED_FILE
from rl.sweeps.pbt_sweep import result_lines
from rl.sweeps.results import DEFAULT_PROGRAM, CommandLine, read_sweep, write_results


class SweepReport(Callback):
    """At the end of a multirun: `<sweep dir>/results.yaml` ranks the sweep's settings by their mean objective
    over seeds (rl.sweeps.results) and maps every job to its directory, overrides and value (a PBT sweep says
    its best member and values instead, rl.sweeps.pbt_sweep); the
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
        sweep = os.path.abspath(str(config.hydra.sweep.dir))
        jobs = read_sweep(sweep, config.get("objective", "final_eval_return"), REFUSED_FILE)
        maximize = not str(config.hydra.sweeper.get("direction", "maximize")).startswith("min")
        launcher = launcher_overrides(list(config.hydra.overrides.hydra))
        command_line = CommandLine(program_as_typed(sys.orig_argv), launcher)
        lines = write_results(sweep, jobs, maximize, command_line)
        if "PbtSweeper" in str(config.hydra.sweeper.get("_target_", "")):
            lines = result_lines(sweep)  # One job, the population: its best member and values, not the job's mean.
        for line in lines:
            print(line)
        refused = jobs.refused
        if refused:
            lines = [f"  {job}: {reason}" for job, reason in refused.items()]
            print(f"{len(refused)} job(s) of the sweep in {sweep} were refused:", *lines, sep="\n", file=sys.stderr)
            sys.exit(2)


def program_as_typed(orig_argv: list[str]) -> str:
    """The training program as the user started it (`sys.orig_argv`, which a re-execution under jemalloc keeps):
    `rl-train`, `python -m rl.train` or `python <path>/train.py`; `python scripts/train.py` when it cannot tell."""
    for index, argument in enumerate(orig_argv[1:], start=1):
        if argument == "-m" and index + 1 < len(orig_argv):
            return f"python -m {orig_argv[index + 1]}"
        if os.path.basename(argument) == "rl-train":
            return "rl-train"
        if argument.endswith(".py"):
            return f"python {argument}"
        if not argument.startswith("-"):
            break
    return DEFAULT_PROGRAM


def launcher_overrides(hydra_overrides: list[str]) -> tuple[str, ...]:
    """The overrides that chose and set the sweep's launcher (`hydra/launcher=anakin_grid`, `hydra.launcher.*`):
    the best setting's seeds then run as the sweep ran them."""
    return tuple(o for o in hydra_overrides if o.startswith(("hydra/launcher=", "hydra.launcher.")))
