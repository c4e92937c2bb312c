"""The life of a run for every launcher: a launcher's `Nodes` act, evaluate and snapshot; `run` evaluates,
checkpoints (on a clock, at the end, on a stop signal) and ends the run `finished`, `interrupted`, `failed`
or `pruned` (by an Optuna search's pruner). A first signal stops cleanly, a second raises `Interrupted`."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import threading
import time
from typing import Any, Callable, Mapping

from rl import checkpointing
from rl.experiments.config import ExperimentConfig
from rl.experiments.launchers.base import LauncherError
from rl.experiments.pruning import OptunaTrial
from rl.experiments.summary import ProgressDisplay, RunSummary, close_loggers, finish_run
from rl.agents.builder import NumericalError


SIGNALS = (signal.SIGINT, signal.SIGTERM)


def requeue_signal() -> int | None:
    """The signal submitit sends a job before its time limit or a pre-emption (SIGUSR2 unless
    SUBMITIT_PREEMPT_SIGNAL names another); None outside a submitit job."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class Interrupted(KeyboardInterrupt):
    """A signal that ends the process now; `exit_code` is 128 + its number."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum
        self.exit_code = 128 + signum


class RunInterrupted(Exception):
    """A run stopped cleanly on a signal: checkpoint and summary written, loggers closed."""

    def __init__(self, signum: int, summary: Any, checkpoint: str | None):
        self.signum = signum
        self.exit_code = 128 + signum
        self.summary = summary
        self.checkpoint = checkpoint
        saved = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint written"
        super().__init__(f"stopped by {signal_name(signum)} at {summary.actor_steps} actor steps; {saved}")


def _set_handlers(handler: Any, signals: tuple[int, ...] = SIGNALS) -> contextlib.ExitStack:
    """Sets `handler` for `signals` (main thread only); closing the stack returned puts the old ones back."""
    stack = contextlib.ExitStack()
    if threading.current_thread() is threading.main_thread():
        for signum in signals:
            stack.callback(signal.signal, signum, signal.signal(signum, handler))
    return stack


class StopRequest:
    """SIGINT and SIGTERM (and a submitit job's requeue signal) set `signum` until `restore()`; a
    second SIGINT or SIGTERM raises `Interrupted`. The requeue signal never cuts a clean stop short:
    it turns a stop already under way into one that requeues the job."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.requeue = requeue_signal()
        self.restore = _set_handlers(self._handle, SIGNALS + ((self.requeue,) if self.requeue else ())).close

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum != self.requeue:  # A second signal: stop now.
            raise Interrupted(signum)
        self.signum = signum


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def raise_on_signals() -> contextlib.ExitStack:
    """While open, SIGINT and SIGTERM raise `Interrupted` in the main thread."""
    return _set_handlers(_raise)


def next_evaluation(experiment: ExperimentConfig, actor_steps: int) -> int:
    every = experiment.eval_every
    return min((actor_steps // every + 1) * every, experiment.max_actor_steps)


@dataclasses.dataclass
class RunRecord:
    """The evaluation curve (actor steps, mean return, epoch time) and seconds spent acting so far."""

    steps: int = 0
    next_eval: int = 0
    eval_returns: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    eval_times: list[float] = dataclasses.field(default_factory=list)
    acting_time_s: float = 0.0

    @classmethod
    def start(cls, experiment: ExperimentConfig) -> "RunRecord":
        state = experiment.restore.state if experiment.restore is not None else {}
        steps, start = int(state.get("actor_steps", 0)), experiment.logger_factory.start_time
        next_eval = int(state.get("next_eval", 0))
        returns = [(int(s), float(v)) for s, v in state.get("eval_returns", [])]
        relative = state.get("eval_times_s")
        times = [math.nan] * len(returns) if relative is None or start is None else [start + float(t) for t in relative]
        next_eval = next_eval if next_eval > steps else next_evaluation(experiment, steps)
        return cls(steps, next_eval, returns, times, float(state.get("acting_time_s", 0.0)))


@dataclasses.dataclass
class Snapshot:
    """The run at one moment, learner paused; `replay()` writes the replay checkpoint, returns its directory."""

    actor_steps: int
    counts: Mapping[str, Any]
    learner_state: Any = None
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    replay: Callable[[], str] | None = None
    process_state: Any = None


class RunCheckpointer:
    """The checkpoints of one run: periodic (`due`), on stop and at the end."""

    def __init__(self, experiment: ExperimentConfig):
        self.experiment = experiment
        self.settings = experiment.checkpoint
        self.last: str | None = experiment.restore.checkpoint if experiment.restore is not None else None
        self.start()

    @property
    def saves_replay(self) -> bool:
        return self.settings.enabled and self.settings.replay

    def start(self) -> None:
        self._next = time.monotonic() + self.settings.every_seconds

    def due(self) -> bool:
        return self.settings.enabled and time.monotonic() >= self._next

    def kept(self) -> str:
        return f"the last good checkpoint is {self.last}" if self.last else "no checkpoint was written"

    def replay_paths(self, restore: Any) -> tuple[str | None, str | None]:
        """Where a replay server checkpoints and what it starts from ((None, None): no checkpoints)."""
        restore_replay = restore is not None and restore.restore_replay
        if not (self.settings.replay and (self.settings.enabled or restore_replay)):
            return None, None
        fallback = checkpointing.replay_of(restore.checkpoint) if restore_replay else None
        return checkpointing.replay_root(self.experiment.run_directory), fallback

    def save(self, nodes: Nodes, periodic: bool = False) -> tuple[str | None, Snapshot]:
        """Writes a checkpoint of the nodes' snapshot with the run's state item (all but the learner state);
        none when checkpoints are off, or when periodic and no step was taken since the last one."""
        snapshot = nodes.snapshot(checkpoint=self.settings.enabled)
        unmoved = periodic and self.last and checkpointing.step_of(self.last) == snapshot.actor_steps
        if unmoved or not self.settings.enabled:
            self.start()  # Nothing moved since the last one: try later.
            return None, snapshot
        experiment, record, start = self.experiment, nodes.record, self.experiment.logger_factory.start_time
        state = {
            "agent": experiment.agent_name,
            "environment": experiment.environment_name,
            "seed": experiment.seed,
            "max_actor_steps": experiment.max_actor_steps,
            "counts": {key: (int(v) if float(v).is_integer() else float(v)) for key, v in snapshot.counts.items()},
            "actor_steps": int(snapshot.actor_steps),
            "next_eval": int(record.next_eval),
            "actor_schedule_step": int(snapshot.actor_steps),
            "session": int(experiment.session),
            "eval_returns": [[int(s), float(v)] for s, v in record.eval_returns],
            "eval_times_s": [t - start for t in record.eval_times] if start is not None else None,
            "wall_time_s": time.time() - start if start is not None else None,
            "acting_time_s": float(record.acting_time_s),
        } | snapshot.state
        replay = tables = None
        if snapshot.replay is not None:
            replay = snapshot.replay()
            tables = checkpointing.describe_tables(experiment.builder.make_replay_tables(experiment.environment_spec))
        self.last = checkpointing.save_checkpoint(
            experiment.run_directory,
            state["actor_steps"],
            snapshot.learner_state,
            state,
            self.settings.keep,
            replay,
            snapshot.process_state,
            tables,
        )
        self.start()
        nodes.saved(self.last, snapshot)
        return self.last, snapshot


class Nodes:
    """What a launcher runs; `run` sets `experiment`, `record` and `checkpoints` before `start`."""

    experiment: ExperimentConfig
    record: RunRecord
    checkpoints: RunCheckpointer

    def start(self) -> None:
        """Builds the nodes, restored from the restore point."""

    def act(self, until: int, pause: Callable[[], bool], progress: ProgressDisplay) -> int:
        """Acts to `until` actor steps or until `pause()`; returns the actor steps now."""
        raise NotImplementedError

    def evaluate(self) -> tuple[int, float, float]:
        """(actor steps, mean return, epoch time) of a round of every evaluator."""
        raise NotImplementedError

    def end_acting(self, interrupted: bool) -> None:
        """Before the last evaluation (finished) or the last checkpoint (interrupted)."""

    def snapshot(self, checkpoint: bool) -> Snapshot:
        raise NotImplementedError

    def saved(self, path: str, snapshot: Snapshot) -> None:
        """A checkpoint of `snapshot` was written at `path`."""

    def end_learning(self) -> None:
        """Before the last checkpoint: the learner stops (still answering `snapshot`)."""

    def counts(self) -> Mapping[str, Any]:
        """The counts so far, for a failed run's summary."""
        return self.snapshot(checkpoint=False).counts

    def failure(self, error: Exception) -> str | None:
        """Why the run failed, when `error` is a failure of the run (None: a bug, re-raised)."""
        if isinstance(error, NumericalError):
            return f"numerical fault: {error}; the learner stopped and {self.checkpoints.kept()}"
        if isinstance(error, LauncherError):
            return str(error)
        return None

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        """After summary.json is written: a launcher's own summaries."""
        return summary

    def close(self) -> None:
        """Always, last: stops what the nodes started."""


def run(experiment: ExperimentConfig, nodes: Nodes) -> RunSummary:
    """Trains `nodes` to `experiment.max_actor_steps`."""
    start = time.perf_counter()
    record = RunRecord.start(experiment)
    checkpoints = RunCheckpointer(experiment)
    nodes.experiment, nodes.record, nodes.checkpoints = experiment, record, checkpoints
    stop = StopRequest()
    loggers_closed = pruned = False

    def close(exit_code: int) -> None:
        nonlocal loggers_closed
        close_loggers(experiment, exit_code=exit_code)
        loggers_closed = True

    def summarize(counts: Mapping[str, Any], status: str) -> RunSummary:
        curve = (record.eval_returns, record.eval_times)
        return finish_run(experiment, counts, *curve, time.perf_counter() - start, record.acting_time_s, status=status)

    def finish(snapshot: Snapshot, status: str, exit_code: int) -> RunSummary:
        summary = nodes.finished(summarize(snapshot.counts, status), status, exit_code)
        close(exit_code)
        return summary

    try:
        trial = OptunaTrial.from_environment(experiment.run_directory)  # None outside a search that prunes.
        nodes.start()
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            progress.advance(record.steps)
            checkpoints.start()
            while record.steps < experiment.max_actor_steps:
                acting_start = time.perf_counter()
                target = min(record.next_eval, experiment.max_actor_steps)
                record.steps = nodes.act(target, lambda: stop.signum is not None or checkpoints.due(), progress)
                record.acting_time_s += time.perf_counter() - acting_start
                if record.steps >= record.next_eval:
                    if record.steps >= experiment.max_actor_steps:
                        nodes.end_acting(interrupted=False)  # The final round sees the final parameters.
                    steps, mean, ended = nodes.evaluate()
                    record.eval_returns.append((int(steps), float(mean)))
                    record.eval_times.append(float(ended))
                    progress.update(eval_return=mean)
                    record.next_eval = next_evaluation(experiment, record.steps)
                    if trial is not None and trial.report(steps, mean):
                        pruned = record.steps < experiment.max_actor_steps  # The last round completes it.
                if stop.signum is not None or pruned:
                    break
                if checkpoints.due():
                    checkpoints.save(nodes, periodic=True)
        if stop.signum is not None or pruned:
            nodes.end_acting(interrupted=True)
        nodes.end_learning()  # The last checkpoint's counts are the learner's last.
        if pruned:  # No checkpoint: a pruned trial is not resumed.
            trial.prune()
            return finish(nodes.snapshot(checkpoint=False), "pruned", 0)
        path, snapshot = checkpoints.save(nodes)
        if stop.signum is not None:
            raise RunInterrupted(stop.signum, finish(snapshot, "interrupted", 128 + stop.signum), path)
        return finish(snapshot, "finished", 0)
    except Interrupted as error:  # A second signal: no checkpoint, no summary, stop now.
        close(error.exit_code)
        raise
    except Exception as error:  # noqa: BLE001 - `failure` decides what is a failure of the run.
        if isinstance(error, RunInterrupted) or (message := nodes.failure(error)) is None:
            raise
        with contextlib.suppress(Exception):  # A "failed" summary, when the counts can still be had.
            nodes.end_learning()
            summarize(nodes.counts(), "failed")
        close(1)
        raise LauncherError(message) from None
    finally:
        stop.restore()
        try:
            nodes.close()
        finally:
            if not loggers_closed:
                close(1)
