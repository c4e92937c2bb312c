"""conf/launcher/local.yaml: every node in this process."""

from __future__ import annotations

from rl.experiments.config import ExperimentConfig
from rl.experiments.run_local import run_local
from rl.experiments.summary import RunSummary


class LocalLauncher:
    def __call__(self, experiment: ExperimentConfig) -> RunSummary:
        return run_local(experiment)
