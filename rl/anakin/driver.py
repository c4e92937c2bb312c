"""The host side of an anakin run: compile once, then run chunks, log, evaluate, and
write the summaries (the schedule, checkpoints and signals: rl/experiments/lifecycle.py).

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
from typing import Any, Callable

import jax
import numpy as np

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
from rl.experiments import lifecycle
from rl.experiments.config import ExperimentConfig
from rl.experiments.launchers.base import LauncherError
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


@dataclasses.dataclass
class ReplicaHistory:
    """What the host keeps of one replica between chunks: its episodes and evaluation curve."""

    episodes: int = 0
    eval_returns: list = dataclasses.field(default_factory=list)


def _trim_replica_logs(experiment: ExperimentConfig, replica_directories: list[str]) -> None:
    """Moves replica log rows written after the restore point to logs/superseded/, as
    `apply_plan` does for the run directory's own logs."""
    from rl.experiments.resume import trim_logs

    restore = experiment.restore
    if restore is None:
        return
    counts = restore.counts
    for directory in replica_directories:
        if os.path.abspath(directory) != os.path.abspath(experiment.run_directory):
            trim_logs(
                directory, int(counts.get("actor_steps", 0)), int(counts.get("learner_steps", 0)), experiment.session
            )


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


def chunks_do_not_reach(steps: int, chunk_steps: int, max_actor_steps: int) -> str:
    return (
        f"the checkpoint is at {steps} actor steps; chunks of {chunk_steps} steps do not reach "
        f"max_actor_steps={max_actor_steps} from there: resume with the run's own launcher.steps_per_chunk"
    )


def state_template(init: Any, keys: jax.Array) -> Any:
    """The structure, shapes and dtypes of the stacked training state (no compilation)."""
    return jax.eval_shape(init, keys)


class AnakinNodes(lifecycle.Nodes):
    """`num_seeds` replicas of `system` in one compiled program, acting and learning in
    chunks of `steps_per_chunk` updates. A checkpoint's "learner state" is the whole
    stacked training state (parameters, optimiser states, replay buffers, environments,
    keys); the state item adds each replica's episodes and curve. Restored, the chunks
    continue with bit-identical inputs: a resumed run computes what an uninterrupted one does."""

    def __init__(self, system: System, evaluation_environment: GymnaxVector, num_seeds: int, steps_per_chunk: int):
        self.system, self.evaluation_environment = system, evaluation_environment
        self.num_seeds, self.steps_per_chunk = num_seeds, steps_per_chunk
        self.logs: list[ReplicaLog] = []
        self.mean_evaluator: Logger | None = None

    def start(self) -> None:
        experiment, num_seeds = self.experiment, self.num_seeds
        if num_seeds > 1:
            experiment.logger_factory.start()  # The run's own W&B run before its replicas' (WandbRun.replica).
        self.replica_experiments = replica_experiments(experiment, num_seeds)
        _trim_replica_logs(experiment, [replica.run_directory for replica in self.replica_experiments])
        keys = replica_keys(experiment.seed, num_seeds)
        sharding = replica_sharding(num_seeds)
        self.evaluation_keys = place(jax.vmap(lambda key: jax.random.fold_in(key, 1))(keys), sharding)
        self.compiled, self.state = compile_programs(
            self.system, self.evaluation_environment, keys, self.steps_per_chunk, sharding
        )
        self.replicas = [ReplicaHistory() for _ in range(num_seeds)]
        self.learner_steps = 0
        restore = experiment.restore
        if restore is not None:
            template = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self.state)
            self.state = place(restore.learner_state(template), sharding)
            self.learner_steps = int(restore.counts.get("learner_steps", 0))
            self.replicas = [
                ReplicaHistory(int(r["episodes"]), [(int(s), float(v)) for s, v in r["eval_returns"]])
                for r in restore.state["anakin"]["replicas"]
            ]
        self.logs = [ReplicaLog.open(replica) for replica in self.replica_experiments]
        self.mean_evaluator = experiment.logger_factory("evaluator", "actor_steps", 0) if num_seeds > 1 else None
        self.chunk_steps = self.steps_per_chunk * self.system.steps_per_update
        # The behaviour policy's schedule, when it names one (DQN's epsilon; a replica's
        # policy step is its own actor steps, all copies together).
        exploration = getattr(experiment.builder, "exploration", None)
        self.exploration = exploration if hasattr(exploration, "exploration_metrics") else None
        if (
            experiment.max_actor_steps - self.record.steps
        ) % self.chunk_steps:  # Refused before, by checkpoint_template.
            raise LauncherError(chunks_do_not_reach(self.record.steps, self.chunk_steps, experiment.max_actor_steps))

    def counts_of(self, replica: int) -> dict[str, int]:
        steps = self.record.steps
        return {
            "actor_steps": steps,
            "learner_steps": self.learner_steps,
            "actor_episodes": self.replicas[replica].episodes,
        }

    def act(self, until: int, pause: Callable[[], bool], progress: ProgressDisplay) -> int:
        while self.record.steps < until:
            chunk_start = time.perf_counter()
            self.state, metrics = self.compiled.chunk(self.state)
            metrics = jax.device_get(metrics)
            rate = self.chunk_steps / (time.perf_counter() - chunk_start)
            self.record.steps += self.chunk_steps
            self._write_chunk_records(metrics, rate)
            progress.update(episode_return=float(np.mean(metrics["episode_return"])))
            progress.advance(self.record.steps, force=True)
            if pause():
                break
        return self.record.steps

    def _write_chunk_records(self, metrics: dict[str, Any], rate: float) -> None:
        """Each replica's learner record and, when episodes ended, its actor record. A chunk
        whose updates took no SGD step (the buffer still short of `min_replay_size`) has no
        learner metrics to report: its learner record holds only the counts and the rate.
        Actor records carry the exploration the policy acts with at the chunk's end (epsilon,
        noise scale: `exploration.exploration_metrics(actor_steps)`), as other launchers' do."""
        for index, log in enumerate(self.logs):
            values = _scalars(take(metrics, index))
            self.learner_steps = int(values.pop("learner_steps"))
            trained = int(values.pop("trained_updates"))
            episodes = int(values.pop("episodes"))
            self.replicas[index].episodes += episodes
            counts = self.counts_of(index)
            episode = {"episode_return": values.pop("episode_return"), "episode_length": values.pop("episode_length")}
            learner_metrics = values if trained else {}  # What is left in `values`: the learner's means.
            log.learner.write({**counts, **learner_metrics, "steps_per_second": rate})
            if episodes:
                exploration = self.exploration
                named = exploration.exploration_metrics(int(counts["actor_steps"])) if exploration is not None else {}
                log.actor.write({**counts, **episode, "episodes": episodes, **named, "steps_per_second": rate})

    def evaluate(self) -> tuple[int, float, float]:
        """An evaluation round of every replica (its keys depend only on the seed and the
        step, so a resumed run evaluates as an uninterrupted one)."""
        steps, compiled = self.record.steps, self.compiled
        round_keys = place(
            jax.vmap(jax.random.fold_in, in_axes=(0, None))(self.evaluation_keys, steps), compiled.sharding
        )
        result = jax.device_get(compiled.evaluate(self.state, round_keys))
        means = []
        for index, log in enumerate(self.logs):
            record = _evaluation_record(self.counts_of(index), result.returns[index], result.lengths[index])
            log.evaluator.write(record)
            self.replicas[index].eval_returns.append((steps, record["episode_return"]))
            means.append(record["episode_return"])
        if self.mean_evaluator is not None:
            self.mean_evaluator.write(
                {
                    "actor_steps": steps,
                    "learner_steps": self.learner_steps,
                    "episode_return": float(np.mean(means)),
                    "episode_return_std": float(np.std(means)),
                    "episode_return_min": float(np.min(means)),
                    "episode_return_max": float(np.max(means)),
                    "replicas": len(self.logs),
                }
            )
        return steps, float(np.mean(means)), time.time()

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        snapshot = lifecycle.Snapshot(self.record.steps, self.counts_of(0))
        if checkpoint:
            snapshot.learner_state = self.state
            snapshot.state["anakin"] = {
                "num_seeds": self.num_seeds,
                "replicas": [
                    {"episodes": r.episodes, "eval_returns": [[int(s), float(v)] for s, v in r.eval_returns]}
                    for r in self.replicas
                ],
            }
        return snapshot

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        """Each replica's summary.json beside the run's (the mean), and the launcher's fields."""
        compile_time = round(self.compiled.compile_time_s, 2)
        extra: dict[str, Any] = {"launcher": "anakin", "compile_time_s": compile_time, "num_seeds": self.num_seeds}
        for log in self.logs:
            log.close()
        self.logs = []
        if self.num_seeds > 1:
            replicas = []
            for index, replica in enumerate(self.replica_experiments):
                curve = self.replicas[index].eval_returns
                replica_summary = finish_run(
                    replica,
                    self.counts_of(index),
                    curve,
                    self.record.eval_times,
                    summary.wall_time_s,
                    self.record.acting_time_s,
                    status=status,
                )
                _add_fields(replica.run_directory, {"compile_time_s": compile_time})
                close_loggers(replica, exit_code=exit_code)  # The replica's W&B run.
                replicas.append(dataclasses.asdict(replica_summary) | {"run_directory": replica.run_directory})
            extra["replicas"] = replicas
            acting = self.record.acting_time_s
            extra["total_actor_steps_per_second"] = (
                round(self.record.steps * self.num_seeds / acting, 1) if acting else None
            )
            _report_replicas(self.experiment.seed, self.replicas)
        _add_fields(self.experiment.run_directory, extra)
        return summary

    def close(self) -> None:
        for log in self.logs:
            log.close()


def run_anakin(
    experiment: ExperimentConfig,
    system: System,
    evaluation_environment: GymnaxVector,
    num_seeds: int,
    steps_per_chunk: int,
) -> RunSummary:
    """Trains `num_seeds` replicas of `system` to `experiment.max_actor_steps` each,
    from the experiment's restore point when it has one."""
    return lifecycle.run(experiment, AnakinNodes(system, evaluation_environment, num_seeds, steps_per_chunk))


def _report_replicas(seed: int, replicas: list[ReplicaHistory]) -> None:
    """Prints each replica's evaluation returns (rl/anakin/replicas.py `replica_table`)
    and copies the lines to train.log, as the terminal logger does with its records."""
    curves = [replica.eval_returns for replica in replicas]
    lines = replica_table(replica_seeds(seed, len(curves)), curves)
    flagged = sum(1 for curve in curves if improvement_flag([value for _, value in curve]))
    title = f"Evaluation returns of each of the {len(curves)} replicas ({flagged} flagged):"
    for line in (title, *(f"  {line}" for line in lines)):
        print(line, flush=True)
        TRANSCRIPT.info(line)


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
