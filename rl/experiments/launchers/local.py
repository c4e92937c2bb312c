"""conf/launcher/local.yaml: every node in this process."""

from __future__ import annotations

from rl.experiments.config import ExperimentConfig
from rl.experiments.summary import RunSummary


class LocalLauncher:
    """Runs every node in this process.

    `deterministic=False` (the default) steps the learner on its own thread beside the
    actor; `True` runs both on one thread in a fixed order (slower, and the order of
    acting and learning no longer depends on thread timing).
    """

    # It restores a run's checkpoint (rl/experiments/resume.py) when the experiment has one.
    supports_resume = True

    def __init__(self, deterministic: bool = False):
        self.deterministic = deterministic

    def __call__(self, experiment: ExperimentConfig) -> RunSummary:
        from rl.experiments.run_local import run_local  # Replay (reverb, TensorFlow) loads when a run starts.
        from rl.replay.quiet import reverb_info_filtered

        with reverb_info_filtered():  # Only our own lines: reverb's INFO lines are dropped.
            return run_local(experiment, deterministic=self.deterministic)
