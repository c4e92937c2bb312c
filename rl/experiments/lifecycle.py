"""The life of a run for every launcher: a launcher's `Nodes` act, evaluate and snapshot; `run` evaluates (a
fresh run first at actor step 0, the untrained policy), checkpoints (on a clock, at the end, on a stop signal)
and ends the run `finished`, `interrupted`, `failed` or `pruned` (by one of the experiment's hooks: a search's
pruner, rl/experiments/hooks.py). A first signal stops cleanly, a second raises `Interrupted`; the run tells the
signal watcher (rl/experiments/signal_watcher.py) what each would do at any moment, for the line it says at once."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from typing import Any, Callable, Mapping, Sequence

from rl import checkpointing
from rl.experiments.config import Experiment
from rl.experiments.launcher import LauncherError
from rl.experiments.hooks import RunHook
from rl.experiments.signal_watcher import tell
from rl.experiments.signals import Interrupted, RunInterrupted, StopRequest, signal_name
from rl.experiments.summary import ProgressDisplay, RunSummary, close_loggers, finish_run
from rl.core import NumericalError


def next_evaluation(experiment: Experiment, actor_steps: int) -> int:
    every = experiment.eval_every
    return min((actor_steps // every + 1) * every, experiment.max_actor_steps)


def told_to_hooks(actor_steps: int) -> bool:
    """Whether the hooks (a search's pruner, a live line, PBT's exchange) hear of the round at `actor_steps`: every
    round but the untrained policy's, at actor step 0 (pruning, stopping early or exchanging on a policy that has
    not learned means nothing). That round is a point on the curve like any other for the run's records and
    summaries (its best return, its time to the threshold, its area), but the final return stays the last round's."""
    return actor_steps > 0


@dataclasses.dataclass
class RunRecord:
    """The evaluation curve (actor steps, mean return, epoch time) and seconds spent acting so far. A fresh run's
    `next_eval` is 0: its curve starts with a round of the untrained policy before it acts, as Brax's and Rejax's
    trainers do, so that a plot starts from the untrained return; a resumed run has evaluated at 0 already (or
    started before that round existed) and never evaluates there again."""

    steps: int = 0
    next_eval: int = 0
    eval_returns: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    eval_times: list[float] = dataclasses.field(default_factory=list)
    acting_time_s: float = 0.0

    @classmethod
    def start(cls, experiment: Experiment) -> "RunRecord":
        state = experiment.restore.state if experiment.restore is not None else {}
        steps = int(state.get("actor_steps", 0))
        start = experiment.logger_factory.start_time
        next_eval = int(state.get("next_eval", 0))
        returns = [(int(s), float(v)) for s, v in state.get("eval_returns", [])]
        relative = state.get("eval_times_s")
        times = [math.nan] * len(returns) if relative is None or start is None else [start + float(t) for t in relative]
        next_eval = next_eval if next_eval > steps else next_evaluation(experiment, steps)
        if experiment.restore is None:
            next_eval = 0  # The untrained policy's round comes first.
        return cls(steps, next_eval, returns, times, float(state.get("acting_time_s", 0.0)))

    @property
    def untrained_round_due(self) -> bool:
        """A fresh run that has neither acted nor evaluated: its first round is the untrained policy's."""
        return self.steps == 0 and self.next_eval == 0 and not self.eval_returns


@dataclasses.dataclass
class Snapshot:
    """The run at one moment, learner paused; `replay()` writes the replay checkpoint, returns its directory."""

    actor_steps: int
    counts: Mapping[str, Any]
    learner_state: Any = None
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    replay: Callable[[], str] | None = None
    process_state: Any = None
    consistent: bool = True  # False: no state to checkpoint yet (a stop before the first one was computed).


class RunCheckpointer:
    """The checkpoints of one run: periodic (`due`), on stop and at the end; each holds `record`, the run's
    evaluation curve so far."""

    def __init__(self, experiment: Experiment, record: RunRecord):
        self.experiment = experiment
        self.record = record
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

    def after_evaluation(self, nodes: Nodes, actor_steps: int, may_end_early: bool) -> bool:
        """A checkpoint follows this evaluation round (the final one's comes with the run's end); by default
        not where a hook may end the run early (a pruned trial keeps no checkpoint) nor where the nodes say not."""
        default = nodes.checkpoint_at_evaluations and not may_end_early
        wanted = default if self.settings.at_evaluations is None else self.settings.at_evaluations
        return self.settings.enabled and wanted and actor_steps < self.experiment.max_actor_steps

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
        if unmoved or not self.settings.enabled or not snapshot.consistent:
            self.start()  # Nothing moved since the last one (or nothing to write yet): try later.
            return None, snapshot
        path = self.write(snapshot)
        nodes.saved(path, snapshot)
        return path, snapshot

    def write(self, snapshot: Snapshot) -> str:
        """Writes `snapshot` as the run's checkpoint with the run's state item; returns its path."""
        experiment = self.experiment
        record = self.record
        start = experiment.logger_factory.start_time
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
        path = checkpointing.save_checkpoint(
            experiment.run_directory,
            state["actor_steps"],
            snapshot.learner_state,
            state,
            self.settings.keep,
            replay,
            snapshot.process_state,
            tables,
        )
        self.last = path
        self.start()
        return path


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What one run hands its nodes, made once before they start: the experiment (the config, with the run
    directory, the restore point and the loggers), the record of the run so far, its checkpoints and the stop
    request. The nodes read it; nothing outside a node sets the node's attributes."""

    experiment: Experiment
    record: RunRecord
    checkpoints: RunCheckpointer
    stop: StopRequest

    @classmethod
    def make(cls, experiment: Experiment) -> "RunContext":
        """The context of a run of `experiment`, from its restore point; the stop request's signal handlers are
        set until `stop.restore()`."""
        record = RunRecord.start(experiment)
        return cls(experiment, record, RunCheckpointer(experiment, record), StopRequest())

    @property
    def run_directory(self) -> str:
        return self.experiment.run_directory

    @property
    def restore(self) -> Any:
        """The resumed run's restore point (rl.experiments.resume.RestorePoint); None for a new run."""
        return self.experiment.restore


class Nodes:
    """What a launcher runs: `run` hands it the run's context when it starts them. Nodes that evaluate beside
    acting (`evaluates_beside_acting`) start each round but the final one with `begin_evaluation` and hand it
    back from `evaluations_done` once it has ended, its rows written at the step it was taken."""

    context: RunContext  # Set by `start`.
    checkpoint_at_evaluations: bool = True  # What `checkpoint.at_evaluations: null` means for these nodes.
    evaluates_beside_acting: bool = False
    # What a first stop signal does to the work in flight while the nodes act, in the line that answers it at once,
    # and whether the checkpoint then holds the actor steps counted so far (False: the work in flight adds some).
    stop_in_flight: str = "finishing the update in flight"
    stops_at_steps_counted: bool = False

    def stopping(self) -> bool:
        """A stop was requested (a first SIGINT or SIGTERM): what waits on it gives up (`wait_for`)."""
        return self.context.stop.signum is not None

    def start(self, context: RunContext) -> None:
        """Builds the nodes for the run of `context`, restored from its restore point; a launcher's nodes call
        this first."""
        self.context = context

    def act(self, until: int, pause: Callable[[], bool], progress: ProgressDisplay) -> int:
        """Acts to `until` actor steps or until `pause()`; returns the actor steps now."""
        raise NotImplementedError

    def evaluate(self) -> tuple[int, float, float]:
        """(actor steps, mean return, epoch time) of a round of every evaluator."""
        raise NotImplementedError

    def begin_evaluation(self) -> None:
        """Starts a round of every evaluator at the actor steps now, beside acting (`evaluates_beside_acting`)."""
        raise NotImplementedError

    def evaluations_done(self, wait: bool) -> list[tuple[int, float, float]]:
        """The rounds begun that have ended since the last call, in order, as `evaluate` gives one; with `wait`,
        every round begun (their end awaited)."""
        return []

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
            return f"numerical fault: {error}; the learner stopped and {self.context.checkpoints.kept()}"
        if isinstance(error, LauncherError):
            return str(error)
        return None

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        """After summary.json is written: a launcher's own summaries."""
        return summary

    def close(self) -> None:
        """Always, last: stops what the nodes started."""


class _Run:
    """One run of `nodes`: what `run`'s steps share (the clock, the record, the checkpoints, the stop request)."""

    def __init__(self, context: RunContext, nodes: Nodes, hooks: Sequence[RunHook]):
        self.experiment = context.experiment
        self.nodes = nodes
        self.start = time.perf_counter()
        self.context = context
        self.record = context.record
        self.checkpoints = context.checkpoints
        self.stop = context.stop
        self.hooks = tuple(hooks)
        self.ended_by: RunHook | None = None  # The hook that ended the run early (a search's pruner).
        self.loggers_closed = False
        self.phase = "starting"  # Then acting, evaluating, checkpointing, ending, ended: for the signals' lines.

    def ending(self) -> bool:
        return self.stop.signum is not None or self.ended_by is not None

    def pausing(self) -> bool:
        """Acting pauses for a stop request or a checkpoint due."""
        return self.stop.signum is not None or self.checkpoints.due()

    def train(self) -> None:
        """Acts, evaluates and checkpoints until the budget is spent, a stop is requested or the trial is pruned."""
        experiment = self.experiment
        record = self.record
        checkpoints = self.checkpoints
        for hook in self.hooks:
            hook.start()
        self.nodes.start(self.context)
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            progress.advance(record.steps)
            self.evaluate_untrained(progress)
            checkpoints.start()
            while record.steps < experiment.max_actor_steps:
                self.phase = "acting"
                acting_start = time.perf_counter()
                target = min(record.next_eval, experiment.max_actor_steps)
                record.steps = self.nodes.act(target, self.pausing, progress)
                record.acting_time_s += time.perf_counter() - acting_start
                self.collect(progress, wait=False)
                evaluated = record.steps >= record.next_eval
                if evaluated:
                    self.evaluate(progress)
                if self.ending():
                    break
                may_end_early = any(hook.may_end_early for hook in self.hooks)
                after_round = evaluated and checkpoints.after_evaluation(self.nodes, record.steps, may_end_early)
                if checkpoints.due() or after_round:
                    self.collect(progress, wait=True)  # A checkpoint's curve holds every round begun before it.
                    self.phase = "checkpointing"
                    self.checkpointed(checkpoints.save(self.nodes, periodic=True)[0])

    def evaluate_untrained(self, progress: ProgressDisplay) -> None:
        """A fresh run's first round, at actor step 0 before any acting: one round of `eval_episodes` per
        evaluator, told to no hook (`told_to_hooks`) and followed by no checkpoint. A stop requested while the
        nodes started skips it (there may be nothing to evaluate yet)."""
        record = self.record
        if not record.untrained_round_due:
            return
        if not self.ending():
            self.evaluate(progress)
        record.next_eval = next_evaluation(self.experiment, record.steps)

    def evaluate(self, progress: ProgressDisplay) -> None:
        """A round of every evaluator onto the curve, told to the hooks (but the untrained policy's round); one
        of them may end the run on it. Nodes that evaluate beside acting begin it and go on (`collect` adds it
        once ended), but the final round, which follows every round begun."""
        experiment = self.experiment
        record = self.record
        final = record.steps >= experiment.max_actor_steps
        if self.nodes.evaluates_beside_acting and not final:
            self.nodes.begin_evaluation()
        else:
            self.collect(progress, wait=True)
            self.phase = "evaluating"
            if final:
                self.nodes.end_acting(interrupted=False)  # The final round sees the final parameters.
            self.add_round(*self.nodes.evaluate(), progress)
        record.next_eval = next_evaluation(experiment, record.steps)

    def collect(self, progress: ProgressDisplay | None, wait: bool) -> None:
        """The rounds begun beside acting that have ended (with `wait`: every one begun) onto the curve."""
        if not self.nodes.evaluates_beside_acting:
            return
        phase = self.phase
        if wait:
            self.phase = "evaluating"  # For a signal's line: the run waits for the rounds in flight.
        for round_ in self.nodes.evaluations_done(wait):
            self.add_round(*round_, progress)
        self.phase = phase

    def add_round(self, steps: int, mean: float, ended: float, progress: ProgressDisplay | None) -> None:
        """The round at `steps` onto the curve and told to the hooks (but the untrained policy's round)."""
        record = self.record
        record.eval_returns.append((int(steps), float(mean)))
        record.eval_times.append(float(ended))
        if progress is not None:
            progress.update(eval_return=mean)
        if not told_to_hooks(steps):
            return
        for hook in self.hooks:
            ends = hook.after_evaluation(steps, mean)
            if ends and self.ended_by is None and steps < self.experiment.max_actor_steps:
                self.ended_by = hook  # The last round completes the run.

    def checkpointed(self, path: str | None) -> None:
        if path is not None:
            for hook in self.hooks:
                hook.after_checkpoint(path)

    def end(self) -> RunSummary:
        """The last checkpoint and the summary: finished, pruned, or interrupted (raises `RunInterrupted`)."""
        nodes = self.nodes
        stop = self.stop
        self.phase = "ending"
        if self.ending():
            nodes.end_acting(interrupted=True)
        nodes.end_learning()  # The last checkpoint's counts are the learner's last.
        if self.ended_by is not None:  # No checkpoint: a run ended early is not resumed.
            self.ended_by.ended_early()
            return self.finish(nodes.snapshot(checkpoint=False), "pruned", 0)
        self.collect(None, wait=True)  # A stopped run's rounds in flight end first: its curve holds them.
        path, snapshot = self.checkpoints.save(nodes)
        self.checkpointed(path)
        if stop.signum is not None:  # With no state to write, the last checkpoint (if any) is the resume's.
            summary = self.finish(snapshot, "interrupted", 128 + stop.signum)
            raise RunInterrupted(stop.signum, summary, path or self.checkpoints.last)
        return self.finish(snapshot, "finished", 0)

    def summarize(self, counts: Mapping[str, Any], status: str) -> RunSummary:
        record = self.record
        wall_time_s = time.perf_counter() - self.start
        curve = (record.eval_returns, record.eval_times)
        return finish_run(self.experiment, counts, *curve, wall_time_s, record.acting_time_s, status=status)

    def finish(self, snapshot: Snapshot, status: str, exit_code: int) -> RunSummary:
        summary = self.nodes.finished(self.summarize(snapshot.counts, status), status, exit_code)
        self.close(exit_code)
        self.phase = "ended"  # Its records are written.
        return summary

    def failed(self) -> None:
        """A "failed" summary, when the counts can still be had."""
        with contextlib.suppress(Exception):
            self.nodes.end_learning()
            self.summarize(self.nodes.counts(), "failed")
        self.close(1)
        self.phase = "ended"

    def close(self, exit_code: int) -> None:
        close_loggers(self.experiment, exit_code=exit_code)
        self.loggers_closed = True

    def first_signal_line(self, signum: int) -> str:
        """What a first stop signal does now (said at once, from the watcher's thread): what the run finishes
        first, and where its checkpoint will be."""
        stopping = f"stopping on {signal_name(signum)}"
        if self.phase == "starting":
            return f"{stopping}: the run stops once it has started (compiled, restored), before it trains"
        doing = {
            "acting": self.nodes.stop_in_flight,
            "evaluating": "finishing the evaluation round in flight",
            "checkpointing": "finishing the checkpoint being written",
        }.get(self.phase)
        if doing is None:
            return f"{stopping}: the run is already ending"
        steps = self.record.steps
        if not self.checkpoints.settings.enabled:
            then = "then its summary (checkpoints are off)"
        elif self.phase != "acting" or self.nodes.stops_at_steps_counted:
            then = f"then a checkpoint at {steps} actor steps"
        else:
            then = f"then a checkpoint ({steps} actor steps so far)"
        return f"{stopping}: {doing}, {then}; a second signal ends the process at once, without it"

    def second_signal_line(self, signum: int) -> str:
        """What a second signal loses (said at once, from the watcher's thread, as the process ends)."""
        ending = f"second {signal_name(signum)}: ending the process now"
        if self.phase == "ended":
            return f"{ending}; the run's records are written"
        return f"{ending}, without a checkpoint or summary; {self.lost()}"

    def lost(self) -> str:
        """What a run ended now loses: the actor steps since its last checkpoint."""
        steps = self.record.steps
        last = self.checkpoints.last
        if not self.checkpoints.settings.enabled:
            return f"checkpoints are off: the run's {steps} actor steps cannot be resumed"
        if last is None and steps == 0:
            return "nothing was trained yet and no checkpoint written (the same command starts the run over)"
        if last is None:
            return f"no checkpoint was written: its {steps} actor steps are lost (the same command starts the run over)"
        kept = checkpointing.step_of(last) or 0
        if kept >= steps:
            return f"the last checkpoint, {last}, holds all {kept} actor steps"
        return f"the last checkpoint, {last}, holds {kept} actor steps: the {steps - kept} since are lost"


def run(context: RunContext, nodes: Nodes, hooks: Sequence[RunHook] = ()) -> RunSummary:
    """Trains `nodes` to the experiment's `max_actor_steps` in the run of `context`, telling `hooks` (a search's,
    rl/experiments/hooks.py) of its start, rounds and checkpoints; one of them may end it early."""
    life = _Run(context, nodes, hooks)
    tell(life.first_signal_line, life.second_signal_line)
    try:
        life.train()
        return life.end()
    except Interrupted as error:  # A second signal: no checkpoint, no summary, stop now.
        life.close(error.exit_code)
        raise
    except Exception as error:  # noqa: BLE001 - `failure` decides what is a failure of the run.
        if isinstance(error, RunInterrupted) or (message := nodes.failure(error)) is None:
            raise
        life.failed()
        raise LauncherError(message) from None
    finally:
        life.stop.restore()
        try:
            nodes.close()
        finally:
            if not life.loggers_closed:
                life.close(1)
