"""The host side of an anakin run: compile once, then run chunks, log, evaluate, and
write the summaries.

Between chunks the host writes the records the other launchers write (learner, actor
and evaluator, each with `actor_steps`, `learner_steps` and `wall_time_s`), for every
replica, and evaluates at the first chunk boundary at or after each multiple of
`eval_every` and at the end of the budget. A run of several replicas ends by printing
(and copying to train.log) each replica's first, best and final evaluation return, so a
replica that never learned is not hidden by the mean.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from typing import Any

import jax
import numpy as np

from rl.anakin.checkpoints import AnakinCheckpointer, Bookkeeping, fresh_bookkeeping, trim_replica_logs
from rl.anakin.devices import place, replica_sharding
from rl.anakin.evaluation import EvaluationResult, evaluate
from rl.anakin.replicas import (
    improvement_flag,
    replica_experiments,
    replica_keys,
    replica_seeds,
    replica_table,
    take,
)
from rl.anakin.system import System, make_chunk
from rl.environments.gymnax_vector import GymnaxVector
from rl.experiments.config import ExperimentConfig
from rl.experiments.interrupts import RunInterrupted, install_stop_requests
from rl.experiments.launchers.errors import LauncherError
from rl.experiments.progress import ProgressDisplay
from rl.experiments.summary import RunSummary, close_loggers, finish_run
from rl.loggers.base import Logger

# The run's transcript: train.log only (conf/hydra/job_logging/rl.yaml), as the records' lines.
TRANSCRIPT = logging.getLogger("rl.transcript")


@dataclasses.dataclass
class Compiled:
    """The compiled programs of a run and the seconds their compilation took."""

    init: Any
    chunk: Any
    evaluate: Any
    compile_time_s: float
    # How the replica axis is spread over devices (None: one device).
    sharding: Any = None


def compile_programs(
    system: System, evaluation_environment: GymnaxVector, keys: jax.Array, steps_per_chunk: int, sharding: Any = None
) -> tuple[Compiled, Any]:
    """Initialises every replica and compiles the chunk and the evaluation round for
    `len(keys)` replicas (vmapped, and with `sharding` spread over devices:
    rl/anakin/devices.py); returns them with the initial state."""
    start = time.perf_counter()
    jit = jax.jit if sharding is None else functools.partial(jax.jit, in_shardings=sharding, out_shardings=sharding)
    keys = place(keys, sharding)
    init = jit(jax.vmap(system.init))
    state = init(keys)
    chunk = jit(jax.vmap(make_chunk(system, steps_per_chunk))).lower(state).compile()

    def evaluation_round(state: Any, key: jax.Array) -> EvaluationResult:
        return evaluate(evaluation_environment, system.evaluation_policy, system.evaluation_params(state), key)

    evaluation = jit(jax.vmap(evaluation_round)).lower(state, keys).compile()
    jax.block_until_ready(state)
    return Compiled(init, chunk, evaluation, time.perf_counter() - start, sharding), state


@dataclasses.dataclass
class ReplicaLog:
    """One replica's loggers."""

    experiment: ExperimentConfig
    learner: Logger
    actor: Logger
    evaluator: Logger

    @classmethod
    def open(cls, experiment: ExperimentConfig) -> "ReplicaLog":
        factory = experiment.logger_factory
        return cls(
            experiment,
            factory("learner", "learner_steps"),
            factory("actor", "actor_steps", 0),
            factory("evaluator", "actor_steps", 0),
        )

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


def _write_chunk_records(
    logs: list[ReplicaLog], book: Bookkeeping, metrics: dict[str, Any], rate: float, exploration: Any = None
) -> None:
    """Each replica's learner record and, when episodes ended, its actor record. A chunk
    whose updates took no SGD step (the buffer still short of `min_replay_size`) has no
    learner metrics to report: its learner record holds only the counts and the rate.
    Actor records carry the exploration the policy acts with at the chunk's end (epsilon,
    noise scale: `exploration.exploration_metrics(actor_steps)`), as other launchers' do."""
    for index, log in enumerate(logs):
        values = _scalars(take(metrics, index))
        book.learner_steps = int(values.pop("learner_steps"))
        trained = int(values.pop("trained_updates"))
        episodes = int(values.pop("episodes"))
        book.replicas[index].episodes += episodes
        counts = book.counts(index)
        episode = {"episode_return": values.pop("episode_return"), "episode_length": values.pop("episode_length")}
        learner_metrics = values if trained else {}  # What is left in `values`: the learner's means.
        log.learner.write({**counts, **learner_metrics, "steps_per_second": rate})
        if episodes:
            named = exploration.exploration_metrics(int(counts["actor_steps"])) if exploration is not None else {}
            log.actor.write({**counts, **episode, "episodes": episodes, **named, "steps_per_second": rate})


def _evaluate(
    compiled: Compiled,
    state: Any,
    evaluation_keys: jax.Array,
    logs: list[ReplicaLog],
    mean_evaluator: Logger | None,
    book: Bookkeeping,
    eval_every: int,
) -> float:
    """An evaluation round of every replica at `book.steps` (its keys depend only on the
    seed and the step, so a resumed run evaluates as an uninterrupted one); returns the
    mean return and moves `book.next_eval` past this step."""
    round_keys = place(jax.vmap(jax.random.fold_in, in_axes=(0, None))(evaluation_keys, book.steps), compiled.sharding)
    result = jax.device_get(compiled.evaluate(state, round_keys))
    means = []
    for index, log in enumerate(logs):
        record = _evaluation_record(book.counts(index), result.returns[index], result.lengths[index])
        log.evaluator.write(record)
        book.replicas[index].eval_returns.append((book.steps, record["episode_return"]))
        means.append(record["episode_return"])
    book.eval_returns.append((book.steps, float(np.mean(means))))
    book.eval_times.append(time.time())
    if mean_evaluator is not None:
        mean_evaluator.write(
            {
                "actor_steps": book.steps,
                "learner_steps": book.learner_steps,
                "episode_return": float(np.mean(means)),
                "episode_return_std": float(np.std(means)),
                "episode_return_min": float(np.min(means)),
                "episode_return_max": float(np.max(means)),
                "replicas": len(logs),
            }
        )
    while book.next_eval <= book.steps:
        book.next_eval += eval_every
    return float(np.mean(means))


def chunks_do_not_reach(steps: int, chunk_steps: int, max_actor_steps: int) -> str:
    return (
        f"the checkpoint is at {steps} actor steps; chunks of {chunk_steps} steps do not reach "
        f"max_actor_steps={max_actor_steps} from there: resume with the run's own launcher.steps_per_chunk"
    )


def run_anakin(
    experiment: ExperimentConfig,
    system: System,
    evaluation_environment: GymnaxVector,
    num_seeds: int,
    steps_per_chunk: int,
) -> RunSummary:
    """Trains `num_seeds` replicas of `system` to `experiment.max_actor_steps` each,
    from the experiment's restore point when it has one."""
    start = time.perf_counter()
    begin = getattr(experiment.logger_factory, "start", None)
    if begin is not None and num_seeds > 1:
        begin()  # The run's own W&B run before its replicas' (WandbRun.replica).
    replicas = replica_experiments(experiment, num_seeds)
    trim_replica_logs(experiment, [replica.run_directory for replica in replicas])
    keys = replica_keys(experiment.seed, num_seeds)
    sharding = replica_sharding(num_seeds)
    evaluation_keys = place(jax.vmap(lambda key: jax.random.fold_in(key, 1))(keys), sharding)
    compiled, state = compile_programs(system, evaluation_environment, keys, steps_per_chunk, sharding)
    checkpoints = AnakinCheckpointer(experiment)
    restored = checkpoints.restore(jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state))
    book = fresh_bookkeeping(num_seeds, experiment.eval_every)
    if restored is not None:
        state, book = restored
        state = place(state, sharding)
    logs = [ReplicaLog.open(replica) for replica in replicas]
    mean_evaluator = experiment.logger_factory("evaluator", "actor_steps", 0) if num_seeds > 1 else None
    steps_per_chunk_env = steps_per_chunk * system.steps_per_update
    # The behaviour policy's schedule, when it names one (DQN's epsilon; a replica's
    # policy step is its own actor steps, all copies together).
    exploration = getattr(experiment.builder, "exploration", None)
    exploration = exploration if hasattr(exploration, "exploration_metrics") else None
    if (experiment.max_actor_steps - book.steps) % steps_per_chunk_env:  # Refused before, by checkpoint_template.
        raise LauncherError(chunks_do_not_reach(book.steps, steps_per_chunk_env, experiment.max_actor_steps))
    stop, restore_signal_handlers = install_stop_requests()
    status = "finished"
    path = None
    try:
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            progress.advance(book.steps)
            checkpoints.start()
            while book.steps < experiment.max_actor_steps:
                chunk_start = time.perf_counter()
                state, metrics = compiled.chunk(state)
                metrics = jax.device_get(metrics)
                chunk_time = time.perf_counter() - chunk_start
                book.acting_time_s += chunk_time
                book.steps += steps_per_chunk_env
                _write_chunk_records(logs, book, metrics, steps_per_chunk_env / chunk_time, exploration)
                progress.update(episode_return=float(np.mean(metrics["episode_return"])))
                if book.steps >= book.next_eval or book.steps >= experiment.max_actor_steps:
                    progress.update(
                        eval_return=_evaluate(
                            compiled, state, evaluation_keys, logs, mean_evaluator, book, experiment.eval_every
                        )
                    )
                progress.advance(book.steps, force=True)
                if stop.requested or checkpoints.due():  # Periodic checkpoints; a signal stops here.
                    path = checkpoints.save(state, book)
                    if stop.requested:
                        status = "interrupted"
                        break
        if status == "finished":
            path = checkpoints.save(state, book)  # The final checkpoint.
        exit_code = 128 + stop.signum if status == "interrupted" else 0
        summary = _write_summaries(
            experiment, replicas, logs, book, compiled, time.perf_counter() - start, status, exit_code
        )
        if num_seeds > 1:
            _report_replicas(experiment.seed, book)
        if status == "interrupted":
            close_loggers(experiment, exit_code=128 + stop.signum)
            raise RunInterrupted(stop.signum, summary, path)
        return summary
    finally:
        restore_signal_handlers()


def _report_replicas(seed: int, book: Bookkeeping) -> None:
    """Prints each replica's evaluation returns (rl/anakin/replicas.py `replica_table`)
    and copies the lines to train.log, as the terminal logger does with its records."""
    curves = [replica.eval_returns for replica in book.replicas]
    lines = replica_table(replica_seeds(seed, len(curves)), curves)
    flagged = sum(1 for curve in curves if improvement_flag([value for _, value in curve]))
    title = f"Evaluation returns of each of the {len(curves)} replicas ({flagged} flagged):"
    for line in (title, *(f"  {line}" for line in lines)):
        print(line, flush=True)
        TRANSCRIPT.info(line)


def _write_summaries(
    experiment: ExperimentConfig,
    replicas: list[ExperimentConfig],
    logs: list[ReplicaLog],
    book: Bookkeeping,
    compiled: Compiled,
    wall_time_s: float,
    status: str,
    exit_code: int = 0,
) -> RunSummary:
    """Each replica's summary.json and, with several, the run directory's (the mean);
    the replicas' loggers are closed with `exit_code`."""
    num_seeds = len(replicas)
    summaries = []
    for index, log in enumerate(logs):
        log.close()
        summary = finish_run(
            log.experiment,
            book.counts(index),
            book.replicas[index].eval_returns,
            book.eval_times,
            wall_time_s,
            book.acting_time_s,
            status=status,
        )
        summaries.append(summary)
        if num_seeds > 1:
            _add_fields(log.experiment.run_directory, {"compile_time_s": round(compiled.compile_time_s, 2)})
            close_loggers(log.experiment, exit_code=exit_code)  # The replica's W&B run.
    summary = summaries[0]
    if num_seeds > 1:
        summary = _mean_summary(experiment, summaries, book.eval_times, wall_time_s, book.acting_time_s, status)
    extra = {"launcher": "anakin", "compile_time_s": round(compiled.compile_time_s, 2), "num_seeds": num_seeds}
    if num_seeds > 1:
        extra["replicas"] = [
            dataclasses.asdict(s) | {"run_directory": r.run_directory} for s, r in zip(summaries, replicas)
        ]
        acting = book.acting_time_s
        extra["total_actor_steps_per_second"] = round(book.steps * num_seeds / acting, 1) if acting else None
    _add_fields(experiment.run_directory, extra)
    return summary


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
