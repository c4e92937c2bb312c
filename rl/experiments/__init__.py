"""Experiments: configuration, node builders and launchers."""

from rl.experiments.builders import Evaluator, build_actor, build_evaluator, build_learner
from rl.experiments.config import ExperimentConfig
from rl.experiments.run_local import run_local
from rl.experiments.summary import RunSummary, read_summary, write_summary

__all__ = [
    "Evaluator",
    "ExperimentConfig",
    "RunSummary",
    "build_actor",
    "build_evaluator",
    "build_learner",
    "read_summary",
    "run_local",
    "write_summary",
]
