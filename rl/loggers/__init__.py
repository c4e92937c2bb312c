"""Loggers: terminal, CSV and Weights & Biases sinks, the wrappers that combine them, and the
factory conf/logger names."""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from typing import Any, Mapping, Sequence

from rl.loggers.base import Dispatcher, Logger, LoggerFactory, TerminalLogger, TimeFilter
from rl.loggers.csv import CSVLogger
from rl.loggers.wandb import WandbLogger, WandbRun, summary_metrics


@dataclasses.dataclass(eq=False)
class DefaultLoggerFactory(LoggerFactory):
    """One logger per node label to the sinks the config switches on; the terminal shows every evaluation,
    at most one other record per `terminal_time_delta` s. `start_time` (epoch s) is `wall_time_s`'s origin."""

    terminal: bool = True
    csv: bool = True
    wandb: Mapping[str, Any] | None = None
    terminal_time_delta: float = 5.0
    terminal_width: int | None = 120  # A terminal line's most characters (None: every field); all go to CSV and W&B.
    directory: str = "logs"
    run_name: str | None = None
    run_config: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    run_group: str | None = None
    run_tags: Sequence[str] = ()

    def __post_init__(self) -> None:
        self.directory = os.path.abspath(self.directory)
        self.start_time = time.time()
        self.wandb_run: WandbRun | None = None
        if self.wandb is not None:
            tags = list(self.wandb.get("tags") or [])
            settings = {**self.wandb, "tags": tags + [tag for tag in self.run_tags if tag not in tags]}
            defaults = {"name": self.run_name, "group": self.run_group}
            settings.update({key: value for key, value in defaults.items() if settings.get(key) is None})
            self.wandb_run = WandbRun(directory=os.path.dirname(self.directory), config=self.run_config, **settings)
        self._loggers: list[Logger] = []

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        sinks: list[Logger] = []
        if self.terminal:
            terminal = TerminalLogger(label, instance, steps_key, self.terminal_width)
            sinks.append(terminal if label == "evaluator" else TimeFilter(terminal, self.terminal_time_delta))
        if self.csv:
            sinks.append(CSVLogger(self.directory, label, steps_key=steps_key or "actor_steps"))
        if self.wandb_run is not None:
            sinks.append(WandbLogger(self.wandb_run, label, steps_key))
        fields = {f"{label}_id": instance} if instance is not None else None
        logger = Dispatcher(sinks, lambda: time.time() - self.start_time, fields)
        self._loggers.append(logger)
        return logger

    def record_summary(self, summary: Mapping[str, Any]) -> None:
        values = summary_metrics(summary)
        if self.wandb_run is not None and values:
            self.wandb_run.start().summary.update(values)

    def replica(self, directory: str, index: int, seed: int) -> "DefaultLoggerFactory":
        """CSV logs under `directory`/logs on the run's clock, no terminal, the replica's W&B run."""
        replica = copy.copy(self)
        replica.directory = os.path.join(directory, "logs")
        replica.terminal = False
        replica.wandb_run = self.wandb_run.replica(index, seed, directory) if self.wandb_run is not None else None
        replica._loggers = []
        return replica

    def close(self, exit_code: int = 0) -> None:
        for logger in self._loggers:
            logger.close()
        self._loggers.clear()
        if self.wandb_run is not None:
            self.wandb_run.finish(exit_code=exit_code)
