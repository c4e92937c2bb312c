"""Independent replicas of one run trained side by side (launcher=anakin, launcher=sebulba): replica i of
`seed=s` trains as a run with `seed=s+i` and writes `<run dir>/seed_<i>/`; the run's summary says how each
did, with a flag for a replica whose evaluation curve shows no learning. `Replicas` is the one layer of their
bookkeeping that both compiled launchers' nodes call, so that their records and failure policy cannot drift."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import numpy as np

from rl.core import NumericalError
from rl.environment_loop import return_statistics
from rl.experiments.config import Experiment
from rl.experiments.lifecycle import RunContext, told_to_hooks
from rl.experiments.replica_plan import ReplicaPlan
from rl.experiments.summary import RunSummary, close_loggers, finish_run, read_summary, write_json
from rl.loggers.base import TRANSCRIPT, Logger, format_number

REPLICA_COLUMNS = ("replica", "seed", "final_eval_return", "best_eval_return", "first_eval_return", "flag")


def seed_replicas(experiment: Experiment, num_seeds: int) -> list[Experiment]:
    """The run itself (one seed), or one experiment per seed in `seed_<index>/`, each with its own logs
    (a restart has moved its rows past the restore point to logs/superseded/: rl.experiments.resume.trim_logs)."""
    if num_seeds == 1:
        return [experiment]
    replicas = []
    for index in range(num_seeds):
        seed = experiment.seed + index
        directory = os.path.join(experiment.run_directory, f"seed_{index}")
        os.makedirs(directory, exist_ok=True)
        factory = experiment.logger_factory.replica(directory, index, seed)
        replicas.append(dataclasses.replace(experiment, seed=seed, run_directory=directory, logger_factory=factory))
    return replicas


def improvement_flag(returns: list[float], threshold: float | None = None) -> str:
    """Why a replica's evaluation curve shows no learning ("" when it does, or ends at `threshold`)."""
    if not returns:
        return "not evaluated"
    if threshold is not None and returns[-1] >= threshold:
        return ""  # Solved, however early (500 at its first round is no failure to improve).
    if max(returns) <= returns[0]:
        return "never improved"
    if returns[-1] <= returns[0]:
        return "final <= first"
    return ""


def replica_table(seeds: list[int], curves: list[list[tuple[int, float]]], threshold: float | None = None) -> list[str]:
    """A header and one aligned line per replica: index, seed, final, best and first return, flag."""
    rows = []
    for index, (seed, curve) in enumerate(zip(seeds, curves)):
        returns = [float(value) for _, value in curve]
        values = [format_number(v) for v in (returns[-1], max(returns), returns[0])] if returns else ["-"] * 3
        rows.append([str(index), str(seed), *values, improvement_flag(returns, threshold)])
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(REPLICA_COLUMNS)]
    line = lambda cells: f"{'  '.join(c.rjust(w) for c, w in zip(cells[:-1], widths))}  {cells[-1]}".rstrip()
    return [line(list(REPLICA_COLUMNS)), *(line(row) for row in rows)]


def add_summary_fields(directory: str, fields: dict[str, Any]) -> None:
    write_json(os.path.join(directory, "summary.json"), read_summary(directory) | fields)


# Each replica's loggers: label -> (steps key, instance).
LOGGERS = {"learner": ("learner_steps",), "actor": ("actor_steps", 0), "evaluator": ("actor_steps", 0)}


class Replicas:
    """Every replica's bookkeeping in a compiled run (launcher=anakin, launcher=sebulba), whose replicas compute
    together while each keeps the records of a run of its own: loggers, counts, curves, evaluator and mean rows,
    the checkpoint's share, the summaries and the table, and one failure policy: a non-finite learner metric ends
    its replica alone (it computes on, unrecorded), said in its summary; a plain one-replica run fails as under
    launcher=local. The launchers' nodes act, learn and hold the devices; they tell this what happened."""

    def __init__(self, plan: ReplicaPlan, context: RunContext):
        """Starts the replicas' hooks and the run's own W&B run (where replicas keep their own records)."""
        self.plan = plan
        self.context = context
        self.count = plan.count
        self.own_records = plan.own_records  # Each replica writes its own run's records.
        experiment = context.experiment
        for hook in (hook for replica in range(self.count) for hook in plan.hooks_of(replica)):
            hook.start()
        if self.own_records:
            experiment.logger_factory.start()  # The run's own W&B run before its replicas'.
        chosen = plan.replicas
        self.experiments = list(chosen) if chosen is not None else seed_replicas(experiment, self.count)
        # A replica that failed or was pruned: (status, why, its counts then); it computes on, unrecorded.
        self.ended: list[tuple[str, str, dict[str, int]] | None] = [None] * self.count
        self.learner_steps = 0
        self.episodes = [0] * self.count
        self.curves: list[list[tuple[int, float]]] = [[] for _ in range(self.count)]
        self.logs: list[dict[str, Logger]] = []
        self.mean_evaluator: Logger | None = None
        self.summaries: list[RunSummary] = []

    @property
    def all_ended(self) -> bool:
        return all(self.ended)

    def open_loggers(self, extra: dict[str, tuple[Any, ...]] | None = None) -> None:
        """Each replica's loggers (`LOGGERS` and `extra`) and the run's mean evaluator where replicas own theirs."""
        labels = LOGGERS | (extra or {})
        for factory in (replica.logger_factory for replica in self.experiments):
            self.logs.append({label: factory(label, *arguments) for label, arguments in labels.items()})
        if self.own_records:
            self.mean_evaluator = self.context.experiment.logger_factory("evaluator", "actor_steps", 0)

    def restore(self, saved: dict[str, Any], counts: dict[str, int]) -> None:
        """Learner steps, episodes and curves from a checkpoint's `state()` and counts."""
        self.learner_steps = int(counts.get("learner_steps", 0))
        self.episodes = [int(replica["episodes"]) for replica in saved["replicas"]]
        self.curves = [[(int(s), float(v)) for s, v in replica["eval_returns"]] for replica in saved["replicas"]]

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the replicas: their episodes and curves."""
        replicas = [
            {"episodes": episodes, "eval_returns": [[int(s), float(v)] for s, v in curve]}
            for episodes, curve in zip(self.episodes, self.curves)
        ]
        return {"num_seeds": self.count, "replicas": replicas}

    def counts_of(self, replica: int, steps: int | None = None) -> dict[str, int]:
        """Replica `replica`'s counts at `steps` actor steps (None: now); an ended one's when it ended."""
        if self.ended[replica]:
            return self.ended[replica][2]
        steps = self.context.record.steps if steps is None else steps
        return dict(actor_steps=steps, learner_steps=self.learner_steps, actor_episodes=self.episodes[replica])

    def end(self, replica: int, status: str, why: str, steps: int | None = None) -> None:
        """Replica `replica` ended `status` (failed, pruned) at `steps` actor steps (None: now), for `why`."""
        self.ended[replica] = (status, why, self.counts_of(replica, steps))
        TRANSCRIPT.info("replica %d (%s) %s: %s", replica, self.experiments[replica].run_directory, status, why)

    def learned(self, learner_steps: int) -> None:
        """The learner steps the updates about to be written reached: the counts of every row from now."""
        self.learner_steps = learner_steps

    def updated(
        self,
        replica: int,
        steps: int,
        metrics: dict[str, float],
        rate: float,
        episodes: int,
        actor_row: dict[str, Any],
        learner_row: bool = True,
    ) -> None:
        """Replica `replica`'s update(s) up to `steps`: its learner row (where `learner_row`), its actor row where
        `episodes` ended (`actor_row`: what it says of them), and the failure policy on its `metrics`."""
        if self.ended[replica]:
            return
        self.episodes[replica] += episodes
        counts = self.counts_of(replica, steps)
        if learner_row:
            self.logs[replica]["learner"].write({**counts, **metrics, "steps_per_second": rate})
        if episodes:
            self.logs[replica]["actor"].write({**counts, **actor_row, "steps_per_second": rate})
        faults = sorted(key for key, value in metrics.items() if not np.isfinite(value))
        if faults:
            message = f"non-finite {', '.join(faults)} in the updates up to learner step {self.learner_steps}"
            if not self.own_records:  # A plain one-replica run fails as under launcher=local.
                raise NumericalError(message)
            self.end(replica, "failed", message, steps)

    def write_round(
        self, steps: int, returns: np.ndarray, lengths: np.ndarray, counts: list[dict[str, int]], learner_steps: int
    ) -> float:
        """The round at `steps` (returns and lengths by replica; each replica's `counts` and the `learner_steps`
        when it began): each replica's evaluator row and curve point, told to its hooks, and the mean row; the
        replicas' mean return (NaN: every replica has ended)."""
        means = []
        for replica, logs in enumerate(self.logs):
            if self.ended[replica]:
                continue
            record = return_statistics(returns[replica])
            row = {**record, "episode_length": float(lengths[replica].mean()), "episodes": returns[replica].size}
            logs["evaluator"].write({**counts[replica], **row})
            self.curves[replica].append((steps, record["episode_return"]))
            means.append(record["episode_return"])
            self.tell_hooks(replica, steps, means[-1])
        if self.mean_evaluator is not None:
            record = {"actor_steps": steps, "learner_steps": learner_steps, **return_statistics(means)}
            self.mean_evaluator.write({**record, "replicas": len(means)})
        return float(np.mean(means)) if means else float("nan")

    def tell_hooks(self, replica: int, steps: int, mean_return: float) -> None:
        """Replica `replica`'s round told to its hooks; the first that ends it (a search's pruner) ends it `pruned`
        (but the last round, which completes it). The untrained policy's round is told to none."""
        if not told_to_hooks(steps):
            return
        final = steps >= self.context.experiment.max_actor_steps
        for hook in self.plan.hooks_of(replica):
            if hook.after_evaluation(steps, mean_return) and not final:
                hook.ended_early()
                self.end(replica, "pruned", f"pruned by the search at {steps} actor steps")
                return

    def finish(
        self,
        summary: RunSummary,
        status: str,
        exit_code: int,
        fields: dict[str, Any],
        before_summary: Callable[[int], Any] | None = None,
        member: Callable[[int], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Each replica's summary (its status: the run's, or how it ended; `fields` and `member(i)` added) after
        `before_summary(i)`, the table of their curves printed and in the transcript; the run summary's fields of
        them (none for a plain one-replica run, whose summary is the run's)."""
        self.close()
        if not self.own_records:
            return {}
        record = self.context.record
        replicas = []
        times = record.eval_times, summary.wall_time_s, record.acting_time_s
        for index, replica in enumerate(self.experiments):
            replica_status, why, _ = self.ended[index] or (status, None, None)
            if before_summary is not None and replica_status == "finished":
                before_summary(index)
            code = 1 if replica_status == "failed" else 0 if replica_status == "pruned" else exit_code
            result = finish_run(replica, self.counts_of(index), self.curves[index], *times, status=replica_status)
            failure = {"failure": why} if replica_status == "failed" else {}
            add_summary_fields(replica.run_directory, fields | (member(index) if member else {}) | failure)
            close_loggers(replica, exit_code=code)
            self.summaries.append(result)
            replicas.append(dataclasses.asdict(result) | {"run_directory": replica.run_directory})
        steps = record.steps * self.count
        total = round(steps / record.acting_time_s, 1) if record.acting_time_s else None
        threshold = self.context.experiment.threshold
        flagged = sum(1 for curve in self.curves if improvement_flag([value for _, value in curve], threshold))
        title = f"Evaluation returns of each of the {len(self.curves)} replicas ({flagged} flagged):"
        table = replica_table([replica.seed for replica in self.experiments], self.curves, threshold)
        for line in (title, *(f"  {line}" for line in table)):
            print(line, flush=True)
            TRANSCRIPT.info(line)
        return {"replicas": replicas, "total_actor_steps_per_second": total}

    def close(self) -> None:
        for logger in (logger for logs in self.logs for logger in logs.values()):
            logger.close()
        self.logs = []
