"""Runs a whole experiment in one process: replay server, learner, actor and evaluator.

By default the learner steps on its own thread beside the actor (`LearnerThread`), so
acting and learning overlap on two cores, and takes a batch whenever reverb's rate
limiter lets its dataset sample one: the replay ratio is enforced by the table, as in a
distributed run.

With `deterministic=True` the run is a function of its command: both run on one thread
in a fixed order (after each actor step the learner takes every batch the ratio's
schedule allows, `ReplayRatio.can_sample`), the replay is in process with a seeded
choice of items (rl/replay/seeded.py) instead of a reverb server whose samplers take no
seed, every actor step is counted (and its deferred adder calls made) before the learner
is asked, checkpoints hold the whole in-process state (replay, environments, actor and
evaluators: a resumed run continues exactly as the uninterrupted one), and the learner logs its
first record in each `DETERMINISTIC_LOG_WINDOWS`-th of the evaluation interval (in actor
steps) rather than one a second.

Checkpoints (`experiment.checkpoint`) are written every `every_seconds`, at the end and
when SIGINT/SIGTERM asks the run to stop; the learner pauses while one is written. A run
built with a restore point (`experiment.restore`, see rl/experiments/resume.py) continues
from it: counts, learner state, the actor's schedules, the evaluation curve and, with
`checkpoint.replay`, the replay tables.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from rl.experiments.config import ExperimentConfig
from rl.experiments.distributed import DistributedProgram, Evaluations
from rl.experiments.interrupts import Interrupted, RunInterrupted, install_stop_requests
from rl.experiments.launchers.errors import LauncherError
from rl.experiments.learner_thread import LearnerThread, release_lock_while_sampling
from rl.experiments.progress import ProgressDisplay
from rl.checkpointing import read_process_state
from rl.experiments.resume import RunCheckpointer, restore_evaluations, run_state
from rl.experiments.summary import RunSummary, close_loggers, finish_run, merge_evaluations
from rl.loggers.aggregators import StepFilter
from rl.numerics import NumericalError

log = logging.getLogger(__name__)


# Learner records of a deterministic run: this many per evaluation interval, at most.
DETERMINISTIC_LOG_WINDOWS = 10


def _replay_counts(client: Any, table: str) -> tuple[int, int]:
    """(inserts, samples) of a restored table's rate limiter."""
    info = client.server_info()[table].rate_limiter_info
    return int(info.insert_stats.completed), int(info.sample_stats.completed)


def run_local(experiment: ExperimentConfig, deterministic: bool = False) -> RunSummary:
    import reverb  # Replay pulls in TensorFlow: import it only when a run starts.

    from rl.replay.seeded import SeededReplay
    from rl.replay.server import make_server

    start = time.perf_counter()
    program = DistributedProgram(experiment, num_actors=1, num_evaluators=1)
    builder = experiment.builder
    restore = experiment.restore
    checkpoints = RunCheckpointer(experiment)
    server = seeded = None
    if deterministic:
        seeded = SeededReplay(program.make_replay_tables(), experiment.seed)
    else:
        server = make_server(program.make_replay_tables(), checkpointer=checkpoints.replay_checkpointer(restore))
    stop, restore_signal_handlers = install_stop_requests()  # SIGINT/SIGTERM: stop at the next step.
    loggers_closed = False
    learner_thread = adder = None
    try:
        client = seeded if seeded is not None else reverb.Client(f"localhost:{server.port}")
        counter = program.make_counter()
        if restore is not None:
            counter.restore(restore.counts)
        learner_log: list[StepFilter] = []  # A deterministic run's filter of learner records.

        def step_filter(logger: Any) -> StepFilter:
            every = max(1, experiment.eval_every // DETERMINISTIC_LOG_WINDOWS)
            learner_log.append(StepFilter(logger, "actor_steps", every))
            return learner_log[-1]

        learner = program.make_learner(client, counter, step_filter if deterministic else None)
        if restore is not None:
            learner.restore(restore.learner_state(learner.save()))
        schedule_step = int(restore.state["actor_schedule_step"]) if restore is not None else 0
        actor_loop = program.make_actor(
            0,
            client,
            learner,
            counter,
            restart=experiment.session,
            initial_step=schedule_step,
        )
        evaluators = [program.make_evaluator(i, learner, counter) for i in range(program.evaluators)]
        histories = [Evaluations() for _ in evaluators]
        if restore is not None:  # The run's curve so far (the mean over its evaluators), for each.
            for history in histories:
                history.returns[:], history.times[:] = restore_evaluations(restore, experiment)

        def evaluation_curve() -> tuple[list[tuple[int, float]], list[float]]:
            returns, times = merge_evaluations([(h.returns, h.times) for h in histories])
            return returns, times or []

        def evaluate() -> float:
            """A round of every evaluator; the mean of their mean returns."""
            means = [h.evaluate(e, experiment.eval_episodes) for e, h in zip(evaluators, histories)]
            return float(np.mean(means))

        adder = actor_loop.actor.adder
        ratio = builder.replay_ratio
        batch = builder.samples_per_learner_step
        samples = inserted = 0  # A restored table's counts, when the replay is restored.
        if restore is not None and restore.restore_replay and seeded is None:
            table = getattr(builder.config, "replay_table_name", None) or next(iter(client.server_info()))
            inserted, samples = _replay_counts(client, table)

        def process_state() -> dict[str, Any]:
            """What a deterministic run continues from besides the learner and the counts."""
            return {
                "replay": seeded.get_state(),
                "actor": actor_loop.get_state(),
                "evaluators": [evaluator.get_state() for evaluator in evaluators],
                "samples": samples,
                "learner_log": learner_log[0].get_state(),
            }

        if deterministic and restore is not None:
            saved = read_process_state(restore.checkpoint)
            if saved is None:
                log.warning(
                    "%s holds no deterministic state (written without launcher.deterministic=true): "
                    "the run continues, but not as it would have uninterrupted",
                    restore.checkpoint,
                )
            else:
                seeded.set_state(saved["replay"])
                actor_loop.set_state(saved["actor"])
                for evaluator, evaluator_state in zip(evaluators, saved["evaluators"]):
                    evaluator.set_state(evaluator_state)
                samples = int(saved["samples"])
                learner_log[0].set_state(saved["learner_log"])
        pause = threading.Lock()  # Held between two learner steps: learning pauses (checkpoints).
        learner_thread = None
        if not deterministic:
            dataset = release_lock_while_sampling(learner, pause)
            learner_thread = LearnerThread(learner, pause, dataset)
        next_eval = program.next_evaluation(restore.actor_steps if restore is not None else 0)
        acting_before = float(restore.state.get("acting_time_s", 0.0)) if restore is not None else 0.0
        acting_start = time.perf_counter()

        def acting_time() -> float:
            return acting_before + time.perf_counter() - acting_start

        def finish_learning() -> None:
            """Flushes the last inserts and lets the learner take the batches they allow
            (the one-thread order has taken them already), then stops it."""
            adder.reset()
            if learner_thread is not None:
                learner_thread.finish()

        def save() -> tuple[str | None, dict[str, Any]]:
            """A checkpoint of this moment, the learner paused (None: checkpoints are off)."""
            actor_loop.count_partial_episode()  # The counts then hold every step taken ...
            sync = getattr(adder, "sync", None)
            if sync is not None:  # ... and an adder process has made every call sent to it.
                sync()
            with pause:
                state = run_state(
                    experiment,
                    counter.get_counts(),
                    step,
                    next_eval,
                    actor_loop.actor.step_count,
                    *evaluation_curve(),
                    acting_time(),
                )
                if seeded is None:
                    return checkpoints.save(learner, state, client), state
                return checkpoints.save(learner, state, None, process_state() if checkpoints.enabled else None), state

        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            step = restore.actor_steps if restore is not None else 0
            progress.advance(step)
            checkpoints.start()
            while step < experiment.max_actor_steps:
                # One batched step of the actor's copies, never past an evaluation point.
                count = min(actor_loop.num_envs, next_eval - step, experiment.max_actor_steps - step)
                records = actor_loop.step(None if count == actor_loop.num_envs else np.arange(count))
                step += count
                if learner_thread is not None:
                    learner_thread.notify()
                else:  # Every step is counted and its items are in before the learner is asked, so that
                    actor_loop.count_partial_episode()  # a checkpoint (at any moment) changes no count.
                while learner_thread is None and ratio.can_sample(inserted + adder.num_items, samples):
                    learner.step()
                    samples += batch
                if records:
                    progress.update(episode_return=records[-1]["episode_return"])
                if step >= next_eval:
                    actor_loop.count_partial_episode()  # Evaluations sit at exact actor steps.
                    if step == experiment.max_actor_steps:
                        finish_learning()  # The final evaluation sees the final parameters.
                    progress.update(eval_return=evaluate())
                    next_eval = program.next_evaluation(step)
                progress.advance(step)
                if stop.requested or checkpoints.due():  # Periodic checkpoints; a signal stops here.
                    path, state = save()
                    if stop.requested:
                        break
        if stop.requested:
            if learner_thread is not None:
                learner_thread.close()
            summary = finish_run(
                experiment,
                state["counts"],
                *evaluation_curve(),
                time.perf_counter() - start,
                acting_time(),
                status="interrupted",
            )
            close_loggers(experiment, exit_code=128 + stop.signum)
            loggers_closed = True
            raise RunInterrupted(stop.signum, summary, path)
        acting = acting_time()
        _, state = save()  # The final checkpoint.
        summary = finish_run(experiment, state["counts"], *evaluation_curve(), time.perf_counter() - start, acting)
        close_loggers(experiment, exit_code=0)
        loggers_closed = True
        return summary
    except NumericalError as error:  # The last good checkpoint stays; the summary says "failed".
        if learner_thread is not None:
            learner_thread.close()
        actor_loop.count_partial_episode()
        finish_run(
            experiment,
            counter.get_counts(),
            *evaluation_curve(),
            time.perf_counter() - start,
            acting_time(),
            status="failed",
        )
        close_loggers(experiment, exit_code=1)
        loggers_closed = True
        kept = f"the last good checkpoint is {checkpoints.last}" if checkpoints.last else "no checkpoint was written"
        raise LauncherError(f"numerical fault: {error}; the learner stopped and {kept}") from None
    except Interrupted as error:  # A second signal: no checkpoint, no summary, stop now.
        close_loggers(experiment, exit_code=error.exit_code)
        loggers_closed = True
        raise
    finally:
        if learner_thread is not None:
            learner_thread.close()
        if not loggers_closed:
            close_loggers(experiment, exit_code=1)
        close = getattr(adder, "close", None)
        if close is not None:  # An adder process stops before its server does.
            close()
        if server is not None:
            server.stop()
        restore_signal_handlers()
