"""summary.json: the one-file result of a run that tools and sweepers read."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Mapping, Sequence

from rl.experiments.config import ExperimentConfig

# A run's status: it ran to its budget, was stopped (SIGINT/SIGTERM), or failed.
STATUSES = ("finished", "interrupted", "failed")


def run_start_time(experiment: ExperimentConfig) -> float | None:
    """The epoch time every record's `wall_time_s` counts from (None: the factory keeps no clock)."""
    return experiment.logger_factory.start_time


def first_reaching(
    threshold: float | None, eval_returns: Sequence[tuple[int, float]], eval_times_s: Sequence[float] | None
) -> tuple[float | None, int | None]:
    """Seconds (None when the times are unknown) and actor steps of the first evaluation at
    or above `threshold`; (None, None) without a threshold or when it was never reached."""
    for k, (steps, value) in enumerate(eval_returns if threshold is not None else ()):
        if value >= threshold:
            return (round(float(eval_times_s[k]), 2) if eval_times_s is not None else None), int(steps)
    return None, None


@dataclasses.dataclass
class RunSummary:
    agent: str
    environment: str
    seed: int
    actor_steps: int
    learner_steps: int
    episodes: int
    wall_time_s: float  # Since the run started (the logger factory's clock, when it has one).
    final_eval_return: float
    best_eval_return: float
    eval_returns: list[tuple[int, float]]
    status: str = "finished"
    # The experiment's threshold and the seconds and actor steps of the first evaluation
    # that reached it (None: no threshold, or not reached).
    threshold: float | None = None
    time_to_threshold_s: float | None = None
    steps_to_threshold: int | None = None
    actor_steps_per_second: float | None = None  # Of the acting phase (set-up, final evaluation excluded).

    @classmethod
    def from_run(
        cls,
        experiment: ExperimentConfig,
        counts: Mapping[str, Any],
        eval_returns: Sequence[tuple[int, float]],
        wall_time_s: float,
        acting_time_s: float | None = None,
        eval_times_s: Sequence[float] | None = None,
        status: str = "finished",
    ) -> "RunSummary":
        """`eval_times_s`: each evaluation's seconds since the run started."""
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
            time_to_threshold_s=time_to_threshold,
            steps_to_threshold=steps_to_threshold,
            actor_steps_per_second=round(actor_steps / acting_time_s, 1) if acting_time_s else None,
        )


def finish_run(
    experiment: ExperimentConfig,
    counts: Mapping[str, Any],
    eval_returns: Sequence[tuple[int, float]],
    eval_times: Sequence[float] | None,
    wall_time_s: float,
    acting_time_s: float | None = None,
    status: str = "finished",
) -> RunSummary:
    """Writes summary.json (and W&B's summary metrics), what every launcher leaves behind.
    `eval_times` are epoch times; with a logger factory that keeps the run's clock, times
    count from its start like every record's, else `wall_time_s` is the launcher's and the
    time to the threshold is unknown."""
    start_time = run_start_time(experiment)
    eval_times_s = None
    if start_time is not None:
        wall_time_s = time.time() - start_time
        if eval_times is not None:
            eval_times_s = [t - start_time for t in eval_times]
    summary = RunSummary.from_run(
        experiment, counts, eval_returns, wall_time_s, acting_time_s, eval_times_s, status=status
    )
    write_summary(experiment.run_directory, summary)
    experiment.logger_factory.record_summary(dataclasses.asdict(summary))
    return summary


def close_loggers(experiment: ExperimentConfig, exit_code: int) -> None:
    experiment.logger_factory.close(exit_code=exit_code)


def write_json(path: str, value: Any) -> None:
    """Writes a JSON file whole, then renames it into place: a reader never sees half a file."""
    with open(f"{path}.tmp", "w") as file:
        json.dump(value, file, indent=2)
    os.replace(f"{path}.tmp", path)


def write_summary(directory: str, summary: RunSummary) -> str:
    path = os.path.join(directory, "summary.json")
    write_json(path, dataclasses.asdict(summary))
    return path


def read_summary(directory: str) -> dict[str, Any]:
    with open(os.path.join(directory, "summary.json")) as file:
        return json.load(file)
