"""The logger factory named by conf/logger: terminal, CSV and wandb in any combination."""

from __future__ import annotations

import copy
import os
import time
from typing import Any, Mapping, Sequence

from rl.loggers.aggregators import ConstantFields, Dispatcher, TimeFilter, WallTime
from rl.loggers.base import Logger, LoggerFactory, NoOpLogger
from rl.loggers.csv import CSVLogger
from rl.loggers.terminal import TerminalLogger
from rl.loggers.wandb import WandbLogger, WandbRun

# Labels whose every record reaches the terminal (and train.log): an evaluation round is
# rare and is the result a reader looks for, so none may be dropped by the rate limit.
UNFILTERED_TERMINAL_LABELS = frozenset({"evaluator"})


class DefaultLoggerFactory(LoggerFactory):
    """Makes one logger per node label, writing to the sinks switched on in the config.

    `directory`, `run_name`, `run_config`, `run_group` and `run_tags` are filled in by
    the experiment, not the YAML: they depend on the run directory, the composed config,
    the sweep the run belongs to and the job's overrides. `wandb.name` and
    `wandb.group`, when set, win over `run_name` and `run_group`; `run_tags` are added to
    `wandb.tags`.

    `steps_key` is the count a node's records are read against (Acme's rule:
    `('learner', 'learner_steps')`, `('actor', 'actor_steps', i)`,
    `('evaluator', 'actor_steps', j)`); None means `actor_steps`. Every record carries
    every count, and the sinks use the key as follows:

    * terminal: the line starts with it (`[learner] learner_steps=... actor_steps=...`);
    * CSV: it is the first column of a new file, `actor_steps` the next;
    * W&B: it stays in the node's namespace (`learner/learner_steps`), but the step
      metric of every namespace remains `actor_steps`, the x-axis all records share, so
      learner, actor and evaluator curves of a run, and the curves of runs with other
      replay ratios, stay comparable; a node whose records lack `actor_steps` is plotted
      against its own steps key.

    The terminal sink of the frequent labels (actor, learner) prints at most one record
    every `terminal_time_delta` seconds; an evaluator's prints every record, so the
    terminal and train.log show every evaluation round (`UNFILTERED_TERMINAL_LABELS`).
    CSV and W&B get every record they are given.

    The factory holds the run's clock: `start_time` (epoch seconds, when the factory was
    made, i.e. when the experiment was composed) is the origin of the `wall_time_s` that
    every record gets and of the summary's times; a resumed run may move it back (records
    follow it).
    """

    def __init__(
        self,
        terminal: bool = True,
        csv: bool = True,
        wandb: Mapping[str, Any] | None = None,
        terminal_time_delta: float = 5.0,
        directory: str = "logs",
        run_name: str | None = None,
        run_config: Mapping[str, Any] | None = None,
        run_group: str | None = None,
        run_tags: Sequence[str] = (),
    ):
        self.terminal = terminal
        self.csv = csv
        self.terminal_time_delta = terminal_time_delta
        self.directory = os.path.abspath(directory)
        self.start_time = time.time()
        self.wandb_run: WandbRun | None = None
        if wandb is not None:
            settings = dict(wandb)
            if settings.get("name") is None:
                settings["name"] = run_name
            if settings.get("group") is None:
                settings["group"] = run_group
            settings["tags"] = list(settings.get("tags") or []) + [
                tag for tag in run_tags if tag not in (settings.get("tags") or [])
            ]
            self.wandb_run = WandbRun(directory=os.path.dirname(self.directory), config=run_config, **settings)
        self._loggers: list[Logger] = []

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        sinks: list[Logger] = []
        if self.terminal:
            terminal: Logger = TerminalLogger(label, instance, steps_key)
            if label not in UNFILTERED_TERMINAL_LABELS:
                terminal = TimeFilter(terminal, self.terminal_time_delta)
            sinks.append(terminal)
        if self.csv:
            sinks.append(CSVLogger(self.directory, label, steps_key=steps_key or "actor_steps"))
        if self.wandb_run is not None:
            sinks.append(WandbLogger(self.wandb_run, label, steps_key))
        if not sinks:
            return NoOpLogger()
        logger: Logger = Dispatcher(sinks)
        if instance is not None:
            logger = ConstantFields(logger, {f"{label}_id": instance})
        logger = WallTime(logger, self.wall_time_s)
        self._loggers.append(logger)
        return logger

    def wall_time_s(self) -> float:
        """Seconds since the run started."""
        return time.time() - self.start_time

    def start(self) -> None:
        """Starts the W&B run (if any) now, so even a run that fails early shows up."""
        if self.wandb_run is not None:
            self.wandb_run.start()

    def record_summary(self, summary: Mapping[str, Any]) -> None:
        """The run's results (summary.json's fields) become the W&B run's summary metrics."""
        if self.wandb_run is not None:
            self.wandb_run.summarize(summary)

    def replica(self, directory: str, index: int, seed: int) -> "DefaultLoggerFactory":
        """CSV logs under `directory`/logs on the run's clock, no terminal (the run's own
        lines show the mean over replicas) and, when the run logs to W&B, a W&B run of the
        replica's own in the run's group (`WandbRun.replica`)."""
        replica = copy.copy(self)
        replica.directory = os.path.join(directory, "logs")
        replica.terminal = False
        replica.wandb_run = self.wandb_run.replica(index, seed, directory) if self.wandb_run is not None else None
        replica._loggers = []
        return replica

    def close(self, exit_code: int = 0) -> None:
        """Closes every sink; W&B marks the run finished (exit code 0) or failed. Idempotent."""
        for logger in self._loggers:
            logger.close()
        self._loggers.clear()
        if self.wandb_run is not None:
            self.wandb_run.finish(exit_code=exit_code)
