"""Runs a whole experiment in one process: replay server, learner, actor and evaluator.

The learner takes a batch whenever the replay table's ratio allows one (`ReplayRatio`),
so the replay ratio is the one a distributed run enforces. By default it steps on its own
thread beside the actor (`LearnerThread`), so acting and learning overlap on two cores;
with `deterministic=True` both run on one thread in a fixed order: after each actor step
the learner takes every batch the ratio allows, and nothing ever waits on replay.
"""

from __future__ import annotations

import time

import numpy as np

from rl.experiments.config import ExperimentConfig
from rl.experiments.distributed import DistributedProgram
from rl.experiments.learner_thread import LearnerThread
from rl.experiments.progress import ProgressDisplay
from rl.experiments.summary import RunSummary, close_loggers, finish_run


def run_local(experiment: ExperimentConfig, deterministic: bool = False) -> RunSummary:
    import reverb  # Replay pulls in TensorFlow: import it only when a run starts.

    start = time.perf_counter()
    program = DistributedProgram(experiment, num_actors=1, num_evaluators=1)
    builder = experiment.builder
    server = reverb.Server(program.make_replay_tables(), port=None)
    loggers_closed = False
    learner_thread = None
    try:
        client = reverb.Client(f"localhost:{server.port}")
        counter = program.make_counter()
        learner = program.make_learner(client, counter)
        actor_loop = program.make_actor(0, client, learner, counter)
        evaluator = program.make_evaluator(0, learner, counter)
        adder = actor_loop.actor.adder
        ratio = builder.replay_ratio
        batch = builder.samples_per_learner_step
        samples = 0
        learner_thread = None if deterministic else LearnerThread(learner, ratio, batch, lambda: adder.num_items)
        next_eval = experiment.eval_every
        acting_start = time.perf_counter()
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            step = 0
            while step < experiment.max_actor_steps:
                # One batched step of the actor's copies, never past an evaluation point.
                count = min(actor_loop.num_envs, next_eval - step, experiment.max_actor_steps - step)
                records = actor_loop.step(None if count == actor_loop.num_envs else np.arange(count))
                step += count
                if learner_thread is not None:
                    learner_thread.notify()
                while learner_thread is None and ratio.can_sample(adder.num_items, samples):
                    learner.step()
                    samples += batch
                if records:
                    progress.update(episode_return=records[-1]["episode_return"])
                if step >= next_eval or step == experiment.max_actor_steps:
                    actor_loop.count_partial_episode()  # Evaluations sit at exact actor steps.
                    progress.update(eval_return=evaluator.evaluate(experiment.eval_episodes))
                    next_eval += experiment.eval_every
                progress.advance(step)
        adder.reset()
        if learner_thread is not None:
            learner_thread.finish()  # The batches the last inserts allow, as in the one-thread order.
        now = time.perf_counter()
        summary = finish_run(
            experiment,
            learner.save(),
            counter.get_counts(),
            evaluator.returns,
            now - start,
            now - acting_start,
            eval_times=evaluator.times,
        )
        close_loggers(experiment, exit_code=0)
        loggers_closed = True
        return summary
    finally:
        if learner_thread is not None:
            learner_thread.close()
        if not loggers_closed:
            close_loggers(experiment, exit_code=1)
        server.stop()

