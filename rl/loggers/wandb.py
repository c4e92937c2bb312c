"""Weights & Biases: one run per experiment, every node's records namespaced by label.

All curves are plotted against `actor_steps`, the x-axis every node's records carry.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

from rl.loggers.base import Logger, LoggingData, to_python_scalar

STEP_METRIC = "actor_steps"


class WandbRun:
    """Owns the wandb run of one experiment; started on first use, finished once."""

    def __init__(
        self,
        project: str,
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        mode: str = "online",
        name: str | None = None,
        directory: str | None = None,
        config: Mapping[str, Any] | None = None,
    ):
        self._settings = dict(
            project=project,
            entity=entity,
            group=group,
            tags=list(tags) or None,
            mode=mode,
            name=name,
            dir=directory,
            config=dict(config or {}),
        )
        self._run = None
        self._lock = threading.Lock()
        self._defined: set[str] = set()

    @property
    def run(self):
        with self._lock:
            if self._run is None:
                import wandb  # Imported lazily: only runs that log to wandb pay for it.

                self._run = wandb.init(reinit=True, **self._settings)
                self._run.define_metric(STEP_METRIC)
            return self._run

    def log(self, label: str, data: LoggingData) -> None:
        run = self.run
        if label not in self._defined:
            run.define_metric(f"{label}/*", step_metric=STEP_METRIC)
            self._defined.add(label)
        row = {f"{label}/{key}": to_python_scalar(value) for key, value in data.items()}
        if STEP_METRIC in data:
            row[STEP_METRIC] = to_python_scalar(data[STEP_METRIC])
        run.log(row)

    def finish(self, exit_code: int = 0) -> None:
        with self._lock:
            if self._run is not None:
                self._run.finish(exit_code=exit_code)
                self._run = None


class WandbLogger(Logger):
    def __init__(self, run: WandbRun, label: str):
        self._run = run
        self._label = label

    def write(self, data: LoggingData) -> None:
        self._run.log(self._label, data)
