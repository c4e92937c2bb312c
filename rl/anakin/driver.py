"""The host side of an anakin run: compile once, then run chunks, log, evaluate, and
write the summaries.

Between chunks the host writes the records the other launchers write (learner, actor
and evaluator, each with `actor_steps`, `learner_steps` and `wall_time_s`), for every
replica, and evaluates at the first chunk boundary at or after each multiple of
`eval_every` and at the end of the budget.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import jax
import numpy as np

from rl.anakin.evaluation import EvaluationResult, evaluate
from rl.anakin.replicas import replica_experiments, replica_keys, take
from rl.anakin.system import System, make_chunk
from rl.environments.gymnax_vector import GymnaxVector
from rl.experiments.config import ExperimentConfig
from rl.experiments.interrupts import RunInterrupted, install_stop_requests
from rl.experiments.progress import ProgressDisplay
from rl.experiments.summary import RunSummary, finish_run, write_summary
from rl.loggers.base import Logger


@dataclasses.dataclass
class Compiled:
    """The compiled programs of a run and the seconds their compilation took."""

    init: Any
    chunk: Any
    evaluate: Any
    compile_time_s: float


def compile_programs(system: System, evaluation_environment: GymnaxVector, keys: jax.Array, steps_per_chunk: int) -> tuple[Compiled, Any]:
    """Initialises every replica and compiles the chunk and the evaluation round for
    `len(keys)` replicas (vmapped); returns them with the initial state."""
    start = time.perf_counter()
    init = jax.jit(jax.vmap(system.init))
    state = init(keys)
    chunk = jax.jit(jax.vmap(make_chunk(system, steps_per_chunk))).lower(state).compile()

    def evaluation_round(state: Any, key: jax.Array) -> EvaluationResult:
        return evaluate(evaluation_environment, system.evaluation_policy, system.evaluation_params(state), key)

    evaluation = jax.jit(jax.vmap(evaluation_round)).lower(state, keys).compile()
    jax.block_until_ready(state)
    return Compiled(init, chunk, evaluation, time.perf_counter() - start), state


@dataclasses.dataclass
class ReplicaLog:
    """One replica's loggers, counts and evaluation curve."""

    experiment: ExperimentConfig
    learner: Logger
    actor: Logger
    evaluator: Logger
    episodes: int = 0
    eval_returns: list = dataclasses.field(default_factory=list)
    eval_times: list = dataclasses.field(default_factory=list)

    @classmethod
    def open(cls, experiment: ExperimentConfig) -> "ReplicaLog":
        factory = experiment.logger_factory
        return cls(experiment, factory("learner", "learner_steps"), factory("actor", "actor_steps", 0), factory("evaluator", "actor_steps", 0))

    def close(self) -> None:
        for logger in (self.learner, self.actor, self.evaluator):
            logger.close()


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {key: np.asarray(value).item() for key, value in metrics.items()}


def _evaluation_record(counts: dict[str, int], returns: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    return {
        **counts,
        "episode_return": float(returns.mean()),
        "episode_return_std": float(returns.std()),
        "episode_return_min": float(returns.min()),
        "episode_return_max": float(returns.max()),
        "episode_length": float(lengths.mean()),
        "episodes": int(returns.size),
    }


def run_anakin(
    experiment: ExperimentConfig,
    system: System,
    evaluation_environment: GymnaxVector,
    num_seeds: int,
    steps_per_chunk: int,
) -> RunSummary:
    """Trains `num_seeds` replicas of `system` to `experiment.max_actor_steps` each."""
    start = time.perf_counter()
    replicas = replica_experiments(experiment, num_seeds)
    keys = replica_keys(experiment.seed, num_seeds)
    evaluation_keys = jax.vmap(lambda key: jax.random.fold_in(key, 1))(keys)
    compiled, state = compile_programs(system, evaluation_environment, keys, steps_per_chunk)
    logs = [ReplicaLog.open(replica) for replica in replicas]
    mean_evaluator = experiment.logger_factory("evaluator", "actor_steps", 0) if num_seeds > 1 else None
    steps_per_chunk_env = steps_per_chunk * system.steps_per_update
    stop, restore_signal_handlers = install_stop_requests()
    acting_time = 0.0
    steps = learner_steps = 0
    next_eval = experiment.eval_every
    status = "finished"
    try:
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            while steps < experiment.max_actor_steps:
                chunk_start = time.perf_counter()
                state, metrics = compiled.chunk(state)
                metrics = jax.device_get(metrics)
                chunk_time = time.perf_counter() - chunk_start
                acting_time += chunk_time
                steps += steps_per_chunk_env
                rate = steps_per_chunk_env / chunk_time
                for index, log in enumerate(logs):
                    values = _scalars(take(metrics, index))
                    learner_steps = int(values.pop("learner_steps"))
                    episodes = int(values.pop("episodes"))
                    log.episodes += episodes
                    counts = {"actor_steps": steps, "learner_steps": learner_steps, "actor_episodes": log.episodes}
                    episode = {"episode_return": values.pop("episode_return"), "episode_length": values.pop("episode_length")}
                    log.learner.write({**counts, **values, "steps_per_second": rate})
                    if episodes:
                        log.actor.write({**counts, **episode, "episodes": episodes, "steps_per_second": rate})
                progress.update(episode_return=float(np.mean(metrics["episode_return"])))
                if steps >= next_eval or steps >= experiment.max_actor_steps:
                    round_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(evaluation_keys, steps)
                    result = jax.device_get(compiled.evaluate(state, round_keys))
                    now = time.time()
                    means = []
                    for index, log in enumerate(logs):
                        counts = {"actor_steps": steps, "learner_steps": learner_steps, "actor_episodes": log.episodes}
                        record = _evaluation_record(counts, result.returns[index], result.lengths[index])
                        log.evaluator.write(record)
                        log.eval_returns.append((steps, record["episode_return"]))
                        log.eval_times.append(now)
                        means.append(record["episode_return"])
                    if mean_evaluator is not None:
                        mean_evaluator.write(
                            {
                                "actor_steps": steps,
                                "learner_steps": learner_steps,
                                "episode_return": float(np.mean(means)),
                                "episode_return_std": float(np.std(means)),
                                "episode_return_min": float(np.min(means)),
                                "episode_return_max": float(np.max(means)),
                                "replicas": num_seeds,
                            }
                        )
                    progress.update(eval_return=float(np.mean(means)))
                    while next_eval <= steps:
                        next_eval += experiment.eval_every
                progress.advance(steps, force=True)
                if stop.requested:
                    status = "interrupted"
                    break
        summaries = []
        for log in logs:
            counts = {"actor_steps": steps, "learner_steps": learner_steps, "actor_episodes": log.episodes}
            log.close()
            summary = finish_run(
                log.experiment, counts, log.eval_returns, log.eval_times, time.perf_counter() - start, acting_time, status=status
            )
            summaries.append(summary)
            if num_seeds > 1:
                _add_fields(log.experiment.run_directory, {"compile_time_s": round(compiled.compile_time_s, 2)})
        summary = summaries[0]
        if num_seeds > 1:
            summary = _mean_summary(
                experiment, summaries, logs[0].eval_times, time.perf_counter() - start, acting_time, status
            )
        extra = {"launcher": "anakin", "compile_time_s": round(compiled.compile_time_s, 2), "num_seeds": num_seeds}
        if num_seeds > 1:
            extra["replicas"] = [dataclasses.asdict(s) | {"run_directory": r.run_directory} for s, r in zip(summaries, replicas)]
            extra["total_actor_steps_per_second"] = round(steps * num_seeds / acting_time, 1) if acting_time else None
        _add_fields(experiment.run_directory, extra)
        if status == "interrupted":
            raise RunInterrupted(stop.signum, summary, None)
        return summary
    finally:
        restore_signal_handlers()


def _mean_summary(
    experiment: ExperimentConfig,
    summaries: list[RunSummary],
    eval_times: list[float],
    wall_time_s: float,
    acting_time_s: float,
    status: str,
) -> RunSummary:
    """The run directory's summary: the counts of one replica, the evaluation curve
    averaged over replicas (they evaluate together, at `eval_times`), and the threshold
    judged on that mean curve."""
    curve = [
        (steps, float(np.mean([s.eval_returns[k][1] for s in summaries])))
        for k, (steps, _) in enumerate(summaries[0].eval_returns)
    ]
    first = summaries[0]
    counts = {"actor_steps": first.actor_steps, "learner_steps": first.learner_steps, "actor_episodes": first.episodes}
    return finish_run(experiment, counts, curve, eval_times, wall_time_s, acting_time_s, status=status)


def _add_fields(directory: str, fields: dict[str, Any]) -> None:
    """Adds launcher-specific fields to a written summary.json (atomically)."""
    path = os.path.join(directory, "summary.json")
    with open(path) as file:
        data = json.load(file)
    data.update(fields)
    temporary = f"{path}.tmp"
    with open(temporary, "w") as file:
        json.dump(data, file, indent=2)
    os.replace(temporary, path)
