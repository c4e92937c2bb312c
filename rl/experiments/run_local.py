"""Runs a whole experiment in one process: replay server, learner, actor and evaluator.

Acting and learning are interleaved on one thread: after each actor step the learner
steps for as long as the replay table's rate limiter would let it sample, so the replay
ratio is the one a distributed run enforces, and nothing ever waits on replay.
"""

from __future__ import annotations

import time
from typing import Any

import jax

from rl.checkpointing import save_checkpoint
from rl.counting import Counter
from rl.experiments.builders import build_actor, build_evaluator, build_learner
from rl.experiments.config import ExperimentConfig
from rl.experiments.progress import ProgressDisplay
from rl.experiments.summary import RunSummary, write_summary


def run_local(experiment: ExperimentConfig) -> RunSummary:
    import reverb  # Replay pulls in TensorFlow: import it only when a run starts.

    start = time.perf_counter()
    learner_key, actor_key, evaluator_key = jax.random.split(jax.random.PRNGKey(experiment.seed), 3)
    builder = experiment.builder
    server = reverb.Server(builder.make_replay_tables(experiment.environment_spec), port=None)
    loggers_closed = False
    try:
        client = reverb.Client(f"localhost:{server.port}")
        counter = Counter()
        learner = build_learner(experiment, learner_key, client, Counter(counter, "learner", 0.0))
        actor_loop = build_actor(experiment, actor_key, client, learner, counter, actor_id=0)
        evaluator = build_evaluator(experiment, evaluator_key, learner, counter)
        adder = actor_loop.actor.adder
        ratio = builder.replay_ratio
        batch = builder.samples_per_learner_step
        samples = 0
        next_eval = experiment.eval_every
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            for step in range(1, experiment.max_actor_steps + 1):
                record = actor_loop.step()
                while ratio.can_sample(adder.num_items, samples, batch):
                    learner.step()
                    samples += batch
                if record is not None:
                    progress.update(episode_return=record["episode_return"])
                if step >= next_eval or step == experiment.max_actor_steps:
                    actor_loop.count_partial_episode()  # Evaluations sit at exact actor steps.
                    progress.update(eval_return=evaluator.evaluate(experiment.eval_episodes))
                    next_eval += experiment.eval_every
                progress.advance(step)
        adder.reset()
        if experiment.checkpoint:
            save_checkpoint(
                f"{experiment.run_directory}/checkpoints",
                int(counter.get_counts().get("learner_steps", 0)),
                {"learner": learner.save(), "counts": counter.get_counts()},
            )
        summary = RunSummary.from_run(experiment, counter.get_counts(), evaluator.returns, time.perf_counter() - start)
        write_summary(experiment.run_directory, summary)
        _close_logger_factory(experiment.logger_factory, exit_code=0)
        loggers_closed = True
        return summary
    finally:
        if not loggers_closed:
            _close_logger_factory(experiment.logger_factory, exit_code=1)
        server.stop()


def _close_logger_factory(factory: Any, exit_code: int) -> None:
    close = getattr(factory, "close", None)
    if close is not None:
        close(exit_code=exit_code)
