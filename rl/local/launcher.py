"""launcher=local: replay, learner (on its own thread), one actor and one evaluator in this process.
`deterministic=True` makes the run a function of its command: one thread in a fixed order, seeded
in-process replay, checkpoints of the whole process state, learner rows logged by actor steps."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from typing import Any, Callable, ClassVar

import numpy as np

from rl import core
from rl.checkpointing import read_process_state
from rl.counting import Counter
from rl.experiments import lifecycle
from rl.experiments.builders import NodeBuilder, StepLockReleasingIterator
from rl.experiments.config import Experiment
from rl.experiments.launcher import Launcher
from rl.experiments.summary import ProgressDisplay, RunSummary
from rl.loggers.base import StepFilter

log = logging.getLogger(__name__)


# Learner records of a deterministic run per evaluation interval, at most.
DETERMINISTIC_LOG_WINDOWS = 10


# A learner waiting this long for a batch the rate limiter still allows is taken to be stuck.
DRAIN_TIMEOUT_S = 120.0


def batches_allowed(client: Any, table: str, batch_size: int, sampled_before: int = 0) -> int:
    """Batches of `batch_size` reverb's rate limiter on `table` lets a learner take in all
    (`sampled_before`: a restored table's earlier sessions' samples)."""
    table_info = client.server_info()[table]
    info = table_info.rate_limiter_info
    if table_info.current_size < info.min_size_to_sample:
        return 0  # Reverb lends nothing below the table's minimum size, whatever the ratio says.
    allowed = info.insert_stats.completed * info.samples_per_insert - info.min_diff - sampled_before
    return int(allowed // batch_size)


@dataclasses.dataclass(eq=False)
class LearnerThread:
    """Runs `learner.step()` under `lock` on its own thread. `notify()` re-raises its error;
    `finish()` takes the batches the last inserts allow, then stops; `close()` stops now."""

    learner: core.Learner
    lock: threading.Lock
    dataset: StepLockReleasingIterator
    batches_allowed: Callable[[], int]

    def __post_init__(self) -> None:
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="learner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                with self.lock:
                    self.learner.step()
        except StopIteration:
            if not self._stopping.is_set():
                self._error = RuntimeError("the learner's replay dataset ended while the run was acting")
        except BaseException as error:  # noqa: BLE001 - handed to the actor's thread.
            self._error = error

    def notify(self) -> None:
        if self._error is not None:
            error = self._error
            self._error = None
            raise error

    def finish(self) -> None:
        """Stops once the learner waits for a batch beyond `batches_allowed()` (a count, not a wait)."""
        while self._thread.is_alive():
            since = self.dataset.waiting_since
            if since is not None and self.dataset.batches >= self.batches_allowed():
                break
            if since is not None and time.monotonic() - since >= DRAIN_TIMEOUT_S:
                log.warning("the learner waited %.0f s for a batch the replay allows; stopping it", DRAIN_TIMEOUT_S)
                break
            time.sleep(0.01)
        self.close()
        self.notify()

    def close(self) -> None:
        self._stopping.set()
        self.dataset.close()
        self._thread.join()


class LocalNodes(lifecycle.Nodes):
    """The replay, the learner and one actor and evaluator, in this process."""

    def __init__(self, experiment: Experiment, deterministic: bool):
        self.program = NodeBuilder(experiment, num_actors=1, num_evaluators=1)
        self.deterministic = deterministic
        self.server = self.learner_thread = None
        self.learner_log: list[StepFilter] = []  # A deterministic run's filter of learner records.
        self.pause = threading.Lock()  # Held between two learner steps: learning pauses.
        self.samples = 0  # Learner samples taken (a restored table's earlier ones included).

    def start(self, context: lifecycle.RunContext) -> None:
        from rl.replay.seeded import SeededReplay

        super().start(context)
        experiment = context.experiment
        program = self.program
        restore = context.restore
        if self.deterministic:
            self.client = SeededReplay(program.make_replay_tables(), experiment.seed)
        else:
            self.server, self.client = program.make_replay_server(*context.checkpoints.replay_paths(restore))
        self.counter = Counter()
        if restore is not None:
            self.counter.restore(restore.counts)
        options = {"log_filter": self._step_filter} if self.deterministic else {"wrap_dataset": self._pausable}
        self.learner = program.make_learner(self.client, self.counter, **options)
        if restore is not None:
            self.learner.restore(restore.learner_state(self.learner.save()))
        schedule_step = int(restore.state["actor_schedule_step"]) if restore is not None else 0
        self.actor_loop = program.make_actor(
            0, self.client, self.learner, self.counter, restart=experiment.session, initial_step=schedule_step
        )
        self.evaluators = [program.make_evaluator(i, self.learner, self.counter) for i in range(program.evaluators)]
        self.adder = self.actor_loop.actor.adder
        if self.deterministic:
            if restore is not None:
                self._restore_process_state(restore.checkpoint)
            return
        table = experiment.builder.config.replay_table_name
        batch = experiment.builder.samples_per_learner_step
        if restore is not None and restore.restore_replay:
            self.samples = int(self.client.server_info()[table].rate_limiter_info.sample_stats.completed)
        allowed = functools.partial(batches_allowed, self.client, table, batch, self.samples)
        self.learner_thread = LearnerThread(self.learner, self.pause, self.dataset, allowed)

    def _pausable(self, dataset: Any) -> StepLockReleasingIterator:
        """The learner's dataset, releasing `pause` while it waits for a batch."""
        self.dataset = StepLockReleasingIterator(dataset, self.pause)
        return self.dataset

    def _step_filter(self, logger: Any) -> StepFilter:
        every = max(1, self.context.experiment.eval_every // DETERMINISTIC_LOG_WINDOWS)
        self.learner_log.append(StepFilter(logger, "actor_steps", every))
        return self.learner_log[-1]

    def _restore_process_state(self, checkpoint: str) -> None:
        saved = read_process_state(checkpoint)
        if saved is None:
            log.warning(
                "%s holds no deterministic state (written without launcher.deterministic=true): "
                "the run continues, but not as it would have uninterrupted",
                checkpoint,
            )
            return
        self.client.set_state(saved["replay"])
        self.actor_loop.set_state(saved["actor"])
        for evaluator, evaluator_state in zip(self.evaluators, saved["evaluators"]):
            evaluator.set_state(evaluator_state)
        self.samples = int(saved["samples"])
        self.learner_log[0].set_state(saved["learner_log"])

    def act(self, until: int, pause: Callable[[], bool], progress: ProgressDisplay) -> int:
        loop = self.actor_loop
        builder = self.context.experiment.builder
        step = self.context.record.steps
        while step < until:
            # One batched step of the actor's copies, never past an evaluation point.
            count = min(loop.num_envs, until - step)
            records = loop.step(None if count == loop.num_envs else np.arange(count))
            step += count
            if self.learner_thread is not None:
                self.learner_thread.notify()
            else:  # Every step is counted and its items are in before the learner is asked, so that
                loop.count_partial_episode()  # a checkpoint (at any moment) changes no count.
                while builder.replay_ratio.can_sample(self.adder.num_items, self.samples):
                    self.learner.step()
                    self.samples += builder.samples_per_learner_step
            if records:
                progress.update(episode_return=records[-1]["episode_return"])
            progress.advance(step)
            if pause():
                break
        return step

    def evaluate(self) -> tuple[int, float, float]:
        self.actor_loop.count_partial_episode()  # Evaluations sit at exact actor steps.
        records = [evaluator.run_evaluation(self.context.experiment.eval_episodes) for evaluator in self.evaluators]
        steps = max(int(record.get("actor_steps", 0)) for record in records)
        mean = sum(float(record["episode_return"]) for record in records) / len(records)
        return steps, mean, max(evaluator.round_started_at for evaluator in self.evaluators)

    def end_acting(self, interrupted: bool) -> None:
        self.actor_loop.count_partial_episode()
        if not interrupted:  # The last inserts are flushed and the learner takes the batches they allow.
            self.adder.reset()
            if self.learner_thread is not None:
                self.learner_thread.finish()

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        self.actor_loop.count_partial_episode()  # The counts then hold every step taken.
        with self.pause:
            snapshot = lifecycle.Snapshot(self.context.record.steps, self.counter.get_counts())
            snapshot.state["actor_schedule_step"] = int(self.actor_loop.actor.step_count)
            if not checkpoint:
                return snapshot
            self.learner.check_finite()
            snapshot.learner_state = self.learner.save()
            if self.server is not None and self.context.checkpoints.saves_replay:
                path = self.client.checkpoint()  # With the learner paused, as its state.
                snapshot.replay = lambda: path
            if self.deterministic:
                snapshot.process_state = {
                    "replay": self.client.get_state(),
                    "actor": self.actor_loop.get_state(),
                    "evaluators": [evaluator.get_state() for evaluator in self.evaluators],
                    "samples": self.samples,
                    "learner_log": self.learner_log[0].get_state(),
                }
            return snapshot

    def end_learning(self) -> None:
        if self.learner_thread is not None:
            self.learner_thread.close()

    def close(self) -> None:
        self.end_learning()
        if self.server is not None:
            self.server.stop()


@dataclasses.dataclass
class LocalLauncher(Launcher):
    """Runs every node in this process."""

    requires: ClassVar[tuple[str, ...]] = ("reverb",)

    deterministic: bool = False

    def fit_experiment(self, experiment: Experiment) -> Experiment:
        """A deterministic checkpoint pickles the environments: refuses those that cannot be pickled."""
        if not (self.deterministic and experiment.checkpoint.enabled):
            return experiment
        import pickle

        from rl.experiments.validation import ConfigError

        if experiment.vector_environment_factory is not None:
            raise ConfigError(
                "environment.backend",
                "launcher.deterministic=true saves its environments in every checkpoint, which envpool's cannot be; "
                "use environment.backend=gymnasium, or checkpoint=false",
            )
        environment = experiment.environment_factory(seed=0)
        try:
            environment.reset()
            pickle.dumps(environment)
        except Exception as error:  # noqa: BLE001 - whatever pickling raises, the answer is the same.
            raise ConfigError(
                "launcher.deterministic",
                f"a deterministic checkpoint saves the environments, and '{experiment.environment_name}' cannot be "
                f"pickled ({type(error).__name__}: {error}); set checkpoint=false to run without checkpoints",
            ) from None
        finally:
            environment.close()
        return experiment

    def __call__(self, experiment: Experiment) -> RunSummary:
        from rl.library_output import reverb_info_filtered

        with reverb_info_filtered():
            nodes = LocalNodes(experiment, self.deterministic)
            return lifecycle.run(lifecycle.RunContext.make(experiment), nodes, experiment.hooks)
