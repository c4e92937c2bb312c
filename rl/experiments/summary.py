"""summary.json, the one-file result of a run; and the live progress bar (silent off a terminal)."""

from __future__ import annotations

import dataclasses
import json
import os
import math
import time
from typing import Any, Mapping, Sequence

import rich
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Column

from rl.checkpointing import write_json
from rl.experiments.config import Experiment

# Ran to its budget, stopped by a signal, failed, stopped early by an Optuna search's pruner.
STATUSES = ("finished", "interrupted", "failed", "pruned")
# What a run returns to a sweeper (conf/config.yaml `objective`): summary.json's keys.
OBJECTIVES = ("final_eval_return", "last_evals_mean", "eval_return_auc")
LAST_EVALUATIONS = 3  # The rounds `last_evals_mean` averages.


def curve_statistics(eval_returns: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Objectives less noisy than the last round: the mean of the last `LAST_EVALUATIONS` rounds of a trained
    policy (the untrained policy's round at actor step 0 is no final result: only when it is the only round), and
    the area under the curve over the actor steps it spans (trapezoids, from the round at step 0 where there is
    one) divided by that span: the mean return along the run (one round: its return; none: NaN, NaN)."""
    if not eval_returns:
        return float("nan"), float("nan")
    steps = [float(s) for s, _ in eval_returns]
    values = [float(v) for _, v in eval_returns]
    trained = [float(v) for s, v in eval_returns if s > 0] or values
    last = trained[-LAST_EVALUATIONS:]
    span = steps[-1] - steps[0]
    area = sum((b - a) * (u + v) / 2 for a, b, u, v in zip(steps, steps[1:], values, values[1:]))
    return sum(last) / len(last), area / span if span else values[-1]


def first_reaching(
    threshold: float | None, eval_returns: Sequence[tuple[int, float]], eval_times_s: Sequence[float] | None
) -> tuple[float | None, int | None]:
    """Seconds (None when times are unknown) and actor steps of the first evaluation at or above
    `threshold`; (None, None) when there is none."""
    for k, (steps, value) in enumerate(eval_returns if threshold is not None else ()):
        if value >= threshold:
            return (round(float(eval_times_s[k]), 2) if eval_times_s is not None else None), int(steps)
    return None, None


@dataclasses.dataclass
class RunSummary:
    """A run's result. Its curve starts with the untrained policy's round at actor step 0 (a fresh run's, see
    rl/experiments/lifecycle.py): a point like any other for the best return and the time to the threshold (an
    untrained policy at the threshold reaches it at step 0); the final return is the last round's."""

    agent: str
    environment: str
    seed: int
    actor_steps: int
    learner_steps: int
    episodes: int
    wall_time_s: float
    final_eval_return: float
    best_eval_return: float
    eval_returns: list[tuple[int, float]]
    status: str = "finished"
    threshold: float | None = None
    time_to_threshold_s: float | None = None
    steps_to_threshold: int | None = None
    actor_steps_per_second: float | None = None  # Of the acting phase only.
    last_evals_mean: float = float("nan")  # Mean of the last LAST_EVALUATIONS evaluation rounds.
    eval_return_auc: float = float("nan")  # Mean return along the evaluation curve (curve_statistics).

    @classmethod
    def from_run(
        cls,
        experiment: Experiment,
        counts: Mapping[str, Any],
        eval_returns: Sequence[tuple[int, float]],
        wall_time_s: float,
        acting_time_s: float | None = None,
        eval_times_s: Sequence[float] | None = None,
        status: str = "finished",
    ) -> "RunSummary":
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        returns = [value for _, value in eval_returns]
        actor_steps = int(counts.get("actor_steps", 0))
        time_to_threshold, steps_to_threshold = first_reaching(experiment.threshold, eval_returns, eval_times_s)
        return cls(
            agent=experiment.agent_name,
            environment=experiment.environment_name,
            seed=experiment.seed,
            actor_steps=actor_steps,
            learner_steps=int(counts.get("learner_steps", 0)),
            episodes=int(counts.get("actor_episodes", 0)),
            wall_time_s=round(wall_time_s, 2),
            final_eval_return=returns[-1] if returns else float("nan"),
            best_eval_return=max(returns) if returns else float("nan"),
            eval_returns=[(int(s), float(v)) for s, v in eval_returns],
            status=status,
            threshold=experiment.threshold,
            actor_steps_per_second=round(actor_steps / acting_time_s, 1) if acting_time_s else None,
            time_to_threshold_s=time_to_threshold,
            steps_to_threshold=steps_to_threshold,
            **dict(zip(("last_evals_mean", "eval_return_auc"), curve_statistics(eval_returns))),
        )

    def objective(self, name: str) -> float:
        """The value a search optimises, by its name in `OBJECTIVES` (the config's `objective`)."""
        values = {
            "final_eval_return": self.final_eval_return,
            "last_evals_mean": self.last_evals_mean,
            "eval_return_auc": self.eval_return_auc,
        }
        return values[name]


def finish_run(
    experiment: Experiment,
    counts: Mapping[str, Any],
    eval_returns: Sequence[tuple[int, float]],
    eval_times: Sequence[float],
    wall_time_s: float,
    acting_time_s: float | None = None,
    status: str = "finished",
) -> RunSummary:
    """Writes summary.json and W&B's summary metrics; `eval_times` are epoch times, counted from the
    logger factory's clock (without one, the time to the threshold is unknown)."""
    start_time = experiment.logger_factory.start_time
    eval_times_s = None
    if start_time is not None:
        wall_time_s = time.time() - start_time
        eval_times_s = [t - start_time for t in eval_times]
    summary = RunSummary.from_run(experiment, counts, eval_returns, wall_time_s, acting_time_s, eval_times_s, status)
    write_json(os.path.join(experiment.run_directory, "summary.json"), dataclasses.asdict(summary))
    experiment.logger_factory.record_summary(dataclasses.asdict(summary))
    return summary


def close_loggers(experiment: Experiment, exit_code: int) -> None:
    experiment.logger_factory.close(exit_code=exit_code)


def read_summary(directory: str) -> dict[str, Any]:
    with open(os.path.join(directory, "summary.json")) as file:
        return json.load(file)


def _rate_text(rate: float) -> str:
    """Steps per second in at most 5 characters: 812, 15.3k, 123k, 2.1M."""
    if rate < 1e4:
        return f"{rate:.0f}"
    scale, suffix = (1e3, "k") if rate < 1e6 else (1e6, "M")
    return f"{rate / scale:.1f}{suffix}" if rate < 100 * scale else f"{rate / scale:.0f}{suffix}"


class ProgressDisplay:
    """Actor steps out of the budget, steps/s, ETA and the latest returns."""

    def __init__(self, total_steps: int, enabled: bool = True, refresh_every: int = 200):
        console = rich.get_console()
        self.enabled = enabled and console.is_terminal
        self._refresh_every = refresh_every
        self._fields = {"episode_return": float("nan"), "eval_return": float("nan")}
        self._start = time.perf_counter()
        self._step = 0
        self._progress = Progress(
            TextColumn("[bold]steps", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=None, table_column=Column(ratio=1)),  # The width the others leave.
            MofNCompleteColumn(table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[rate]:>5}/s"),
            TextColumn("return {task.fields[episode_return]:>7}"),
            TextColumn("eval {task.fields[eval_return]:>7}"),
            TimeRemainingColumn(),
            console=console,
            disable=not self.enabled,
            expand=True,
        )
        self._task = self._progress.add_task("train", total=total_steps, rate="-", episode_return="-", eval_return="-")

    def __enter__(self) -> "ProgressDisplay":
        self._progress.start()  # Rich starts no display when disabled.
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            if self._step:
                self._refresh()  # End on the true final count.
            self._progress.stop()

    def update(self, **fields: float) -> None:
        self._fields.update(fields)

    def advance(self, step: int, force: bool = False) -> None:
        self._step = step
        if self.enabled and (force or step % self._refresh_every == 0):
            self._refresh()

    def _refresh(self) -> None:
        rate = self._step / max(time.perf_counter() - self._start, 1e-9)
        texts = {key: f"{value:.1f}" if math.isfinite(value) else "-" for key, value in self._fields.items()}
        self._progress.update(self._task, completed=self._step, rate=_rate_text(rate), **texts)
