"""summary.json: the one-file result of a run that tools and sweepers read."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Sequence

from rl.experiments.config import ExperimentConfig


@dataclasses.dataclass
class RunSummary:
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
    # Actor steps per second of the acting phase (set-up and final evaluation excluded).
    actor_steps_per_second: float | None = None

    @classmethod
    def from_run(
        cls,
        experiment: ExperimentConfig,
        counts: Mapping[str, Any],
        eval_returns: Sequence[tuple[int, float]],
        wall_time_s: float,
        acting_time_s: float | None = None,
    ) -> "RunSummary":
        returns = [value for _, value in eval_returns]
        return cls(
            agent=experiment.agent_name,
            environment=experiment.environment_name,
            seed=experiment.seed,
            actor_steps=int(counts.get("actor_steps", 0)),
            learner_steps=int(counts.get("learner_steps", 0)),
            episodes=int(counts.get("actor_episodes", 0)),
            wall_time_s=round(wall_time_s, 2),
            final_eval_return=returns[-1] if returns else float("nan"),
            best_eval_return=max(returns) if returns else float("nan"),
            eval_returns=[(int(s), float(v)) for s, v in eval_returns],
            actor_steps_per_second=(
                round(int(counts.get("actor_steps", 0)) / acting_time_s, 1) if acting_time_s else None
            ),
        )


def finish_run(
    experiment: ExperimentConfig,
    learner_state: Any,
    counts: Mapping[str, Any],
    eval_returns: Sequence[tuple[int, float]],
    wall_time_s: float,
    acting_time_s: float | None = None,
) -> RunSummary:
    """Writes what every launcher leaves behind: the checkpoint and summary.json."""
    if experiment.checkpoint:
        from rl.checkpointing import save_checkpoint

        save_checkpoint(
            os.path.join(experiment.run_directory, "checkpoints"),
            int(counts.get("learner_steps", 0)),
            {"learner": learner_state, "counts": dict(counts)},
        )
    summary = RunSummary.from_run(experiment, counts, eval_returns, wall_time_s, acting_time_s)
    write_summary(experiment.run_directory, summary)
    return summary


def close_loggers(experiment: ExperimentConfig, exit_code: int) -> None:
    close = getattr(experiment.logger_factory, "close", None)
    if close is not None:
        close(exit_code=exit_code)


def write_summary(directory: str, summary: RunSummary) -> str:
    path = os.path.join(directory, "summary.json")
    with open(path, "w") as file:
        json.dump(dataclasses.asdict(summary), file, indent=2)
    return path


def read_summary(directory: str) -> dict[str, Any]:
    with open(os.path.join(directory, "summary.json")) as file:
        return json.load(file)
