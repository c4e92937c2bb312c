"""Checkpoints of an anakin run, in the layout and under the contract of the other
launchers (rl/checkpointing.py, rl/experiments/resume.py).

The "learner state" of a checkpoint is the whole on-device training state of every
replica, stacked on a leading replica axis: parameters, optimiser states, the replay
buffer (DQN, SAC), the environment copies and the keys. state.json holds the host's
bookkeeping: counts, the next evaluation, acting time, the run's evaluation curve (the
mean over replicas) and each replica's episodes and curve. Restored, the compiled
chunks continue with bit-identical inputs, so a resumed run computes what an
uninterrupted one does. (`checkpoint.replay` is not consulted: the buffer lives in the
training state and is always saved.)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax

from rl.experiments.config import ExperimentConfig
from rl.experiments.resume import RunCheckpointer, restore_evaluations, run_state


@dataclasses.dataclass
class ReplicaHistory:
    """What the host keeps of one replica between chunks."""

    episodes: int = 0
    eval_returns: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Bookkeeping:
    """The host side of a run: counts, the next evaluation, the evaluation curve (the
    mean over replicas) and its times, acting seconds, and each replica's history."""

    replicas: list[ReplicaHistory]
    steps: int = 0
    learner_steps: int = 0
    next_eval: int = 0
    acting_time_s: float = 0.0
    eval_returns: list = dataclasses.field(default_factory=list)
    eval_times: list = dataclasses.field(default_factory=list)

    def counts(self, replica: int = 0) -> dict[str, int]:
        return {
            "actor_steps": self.steps,
            "learner_steps": self.learner_steps,
            "actor_episodes": self.replicas[replica].episodes,
        }


def fresh_bookkeeping(num_seeds: int, eval_every: int) -> Bookkeeping:
    return Bookkeeping([ReplicaHistory() for _ in range(num_seeds)], next_eval=eval_every)


def state_template(init: Any, keys: jax.Array) -> Any:
    """The structure, shapes and dtypes of the stacked training state (no compilation)."""
    return jax.eval_shape(init, keys)


class AnakinCheckpointer:
    """Periodic, stop and final checkpoints of an anakin run (RunCheckpointer's clock
    and files) and the restore of a run from one."""

    def __init__(self, experiment: ExperimentConfig):
        self.experiment = experiment
        self.files = RunCheckpointer(experiment)

    @property
    def last(self) -> str | None:
        return self.files.last

    def start(self) -> None:
        self.files.start()

    def due(self) -> bool:
        return self.files.due()

    def save(self, state: Any, book: Bookkeeping) -> str | None:
        """Writes a checkpoint of `state` (the stacked training state) and `book`."""
        saved = run_state(
            self.experiment,
            book.counts(0),
            book.steps,
            book.next_eval,
            book.steps,
            book.eval_returns,
            book.eval_times,
            book.acting_time_s,
        )
        saved["anakin"] = {
            "num_seeds": len(book.replicas),
            "replicas": [
                {"episodes": r.episodes, "eval_returns": [[int(s), float(v)] for s, v in r.eval_returns]}
                for r in book.replicas
            ],
        }
        return self.files.save(_Saved(state), saved)

    def restore(self, template: Any) -> tuple[Any, Bookkeeping] | None:
        """(stacked training state, bookkeeping) of the experiment's restore point, or
        None for a run that starts from the beginning."""
        restore = self.experiment.restore
        if restore is None:
            return None
        state = restore.learner_state(template)
        returns, times = restore_evaluations(restore, self.experiment)
        replicas = [
            ReplicaHistory(int(r["episodes"]), [(int(s), float(v)) for s, v in r["eval_returns"]])
            for r in restore.state["anakin"]["replicas"]
        ]
        counts = restore.counts
        book = Bookkeeping(
            replicas,
            steps=restore.actor_steps,
            learner_steps=int(counts.get("learner_steps", 0)),
            next_eval=int(restore.state["next_eval"]),
            acting_time_s=float(restore.state.get("acting_time_s", 0.0)),
            eval_returns=returns,
            eval_times=times,
        )
        return state, book


class _Saved:
    """What RunCheckpointer saves of a "learner": its state."""

    def __init__(self, state: Any):
        self.state = state

    def save(self) -> Any:
        return self.state


def trim_replica_logs(experiment: ExperimentConfig, replica_directories: list[str]) -> None:
    """Moves replica log rows written after the restore point to logs/superseded/, as
    `apply_plan` does for the run directory's own logs."""
    from rl.experiments.resume import _trim_logs

    restore = experiment.restore
    if restore is None:
        return
    counts = restore.counts
    for directory in replica_directories:
        if os.path.abspath(directory) != os.path.abspath(experiment.run_directory):
            _trim_logs(
                directory, int(counts.get("actor_steps", 0)), int(counts.get("learner_steps", 0)), experiment.session
            )
