"""Trains an agent: `python scripts/train.py [group=option ...] [key=value ...]`.

`--help` lists the config groups and their options, `--cfg job` prints the composed
config, `-m` runs a sweep (comma lists, `hydra/launcher=joblib` for parallel jobs,
`hydra/sweeper=dqn_optuna` for an Optuna search). Returns the final evaluation return,
for sweepers.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from rl.experiments.make_experiment import make_experiment  # noqa: E402
from rl.experiments.launchers.errors import LauncherError  # noqa: E402
from rl.experiments.summary import close_loggers  # noqa: E402
from rl.experiments.validation import ConfigError  # noqa: E402


def sweep_group() -> str | None:
    """The W&B group of a multirun job: the sweep directory's name (None for single runs)."""
    hydra_config = HydraConfig.get()
    if hydra_config.mode != RunMode.MULTIRUN:
        return None
    return os.path.basename(os.path.normpath(str(hydra_config.sweep.dir))) or None


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(config: DictConfig) -> float:
    runtime = HydraConfig.get().runtime
    try:
        experiment, launch = make_experiment(config, runtime.output_dir, runtime.choices, run_group=sweep_group())
    except ConfigError as error:
        print(f"Invalid configuration: {error}", file=sys.stderr)
        sys.exit(2)
    factory = experiment.logger_factory
    try:
        start = getattr(factory, "start", None)
        if start is not None:
            start()  # The W&B run exists (with its config) before the first step.
        summary = launch(experiment=experiment)
    except LauncherError as error:  # Expected failures (unreachable cluster, dead learner): no traceback.
        close_loggers(experiment, exit_code=1)
        print(f"Run failed: {error}", file=sys.stderr)
        sys.exit(1)
    except BaseException as error:
        # W&B marks a run that ends with a non-zero exit code as failed/crashed. Closing
        # here also frees the run for the next job of a multirun in this process.
        close_loggers(experiment, exit_code=130 if isinstance(error, KeyboardInterrupt) else 1)
        raise
    close_loggers(experiment, exit_code=0)  # A no-op when the launcher has closed them.
    print(
        f"final evaluation return {summary.final_eval_return:.1f} after {summary.actor_steps} actor steps "
        f"({summary.wall_time_s:.0f} s); summary in {runtime.output_dir}/summary.json"
    )
    return summary.final_eval_return


if __name__ == "__main__":
    main()
