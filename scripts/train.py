"""Trains an agent: `python scripts/train.py [group=option ...] [key=value ...]`.

`--help` lists the config groups and their options, `--cfg job` prints the composed
config, `-m` runs a sweep. Returns the final evaluation return, for sweepers.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from rl.experiments.make_experiment import make_experiment  # noqa: E402
from rl.experiments.validation import ConfigError  # noqa: E402


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(config: DictConfig) -> float:
    runtime = HydraConfig.get().runtime
    try:
        experiment, launch = make_experiment(config, runtime.output_dir, runtime.choices)
    except ConfigError as error:
        print(f"Invalid configuration: {error}", file=sys.stderr)
        sys.exit(2)
    summary = launch(experiment=experiment)
    print(
        f"final evaluation return {summary.final_eval_return:.1f} after {summary.actor_steps} actor steps "
        f"({summary.wall_time_s:.0f} s); summary in {runtime.output_dir}/summary.json"
    )
    return summary.final_eval_return


if __name__ == "__main__":
    main()
