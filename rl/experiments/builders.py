"""Builds the nodes of an experiment: learner, actors and evaluators.

Launchers bind `experiment` (with functools.partial) and call these with the other
arguments, so a single-process run and a distributed one build identical nodes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import numpy as np

from rl import core
from rl.counting import Counter
from rl.environment_loop import EnvironmentLoop
from rl.environments.vector import VectorEnvironment
from rl.experiments.compilation import enable_compilation_cache
from rl.experiments.config import ExperimentConfig
from rl.loggers.aggregators import TimeFilter

# Actors other than actor 0 log at most one episode per this many seconds.
SPARSE_ACTOR_LOG_INTERVAL_S = 10.0


def environment_seed(key: jax.Array) -> int:
    """A uint32 environment seed drawn from a JAX key."""
    return int(jax.random.bits(key, dtype=np.uint32))


def build_learner(
    experiment: ExperimentConfig, random_key: jax.Array, replay_client: Any, counter: Counter
) -> core.Learner:
    """The learner reading from replay, counting under the prefix `learner`."""
    enable_compilation_cache(experiment.compilation_cache)
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    dataset = experiment.builder.make_dataset_iterator(replay_client, experiment.environment_spec)
    logger = TimeFilter(
        experiment.logger_factory("learner", "learner_steps"), experiment.learner_log_interval_s
    )
    learner_counter = Counter(counter, "learner", time_delta=0.0)
    return experiment.builder.make_learner(random_key, networks, dataset, replay_client, learner_counter, logger)


def build_actor(
    experiment: ExperimentConfig,
    random_key: jax.Array,
    replay: Any,
    variable_source: core.VariableSource,
    counter: Counter,
    actor_id: int,
) -> EnvironmentLoop:
    """An environment loop acting with the behaviour policy and writing to replay."""
    enable_compilation_cache(experiment.compilation_cache)
    environment_key, actor_key = jax.random.split(random_key)
    environment = VectorEnvironment.make(
        experiment.environment_factory, environment_seed(environment_key), experiment.num_envs
    )
    builder = experiment.builder
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    policy = builder.make_policy(networks, experiment.environment_spec, evaluation=False)
    adder = builder.make_adder(replay, experiment.environment_spec)
    actor = builder.make_actor(actor_key, policy, experiment.environment_spec, variable_source, adder)
    logger = experiment.logger_factory("actor", "actor_steps", actor_id)
    if actor_id != 0:
        logger = TimeFilter(logger, SPARSE_ACTOR_LOG_INTERVAL_S)
    return EnvironmentLoop(environment, actor, Counter(counter, "actor", time_delta=0.0), logger)


@dataclasses.dataclass
class Evaluator:
    """Runs rounds of evaluation episodes and logs one record per round.

    `returns` holds (actor steps, mean return) per round and `times` the epoch time
    (time.time()) each round ended, for the summary's time to the threshold.
    """

    loop: EnvironmentLoop
    logger: Any
    counter: Counter
    returns: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    times: list[float] = dataclasses.field(default_factory=list)

    def evaluate(self, num_episodes: int) -> float:
        self.loop.actor.update(wait=True)
        records = self.loop.run_episodes(num_episodes)
        episode_returns = np.array([r["episode_return"] for r in records], dtype=np.float64)
        counts = self.counter.get_counts()
        actor_steps = int(counts.get("actor_steps", 0))
        self.returns.append((actor_steps, float(episode_returns.mean())))
        self.times.append(time.time())
        self.logger.write(
            {
                **counts,
                "episode_return": float(episode_returns.mean()),
                "episode_return_std": float(episode_returns.std()),
                "episode_return_min": float(episode_returns.min()),
                "episode_return_max": float(episode_returns.max()),
                "episode_length": float(np.mean([r["episode_length"] for r in records])),
                "episodes": num_episodes,
            }
        )
        return float(episode_returns.mean())


def build_evaluator(
    experiment: ExperimentConfig,
    random_key: jax.Array,
    variable_source: core.VariableSource,
    counter: Counter,
    make_actor: Callable[..., core.Actor] | None = None,
    evaluator_id: int = 0,
) -> Evaluator:
    """Evaluation-policy actor with no adder; its records are keyed by actor_steps and
    carry `evaluator_id`. It plays a round's episodes side by side, one per environment
    copy (`eval_episodes` copies)."""
    enable_compilation_cache(experiment.compilation_cache)
    environment_key, actor_key = jax.random.split(random_key)
    environment = VectorEnvironment.make(
        experiment.environment_factory, environment_seed(environment_key), experiment.eval_episodes
    )
    builder = experiment.builder
    make_actor = make_actor or builder.make_actor
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    policy = builder.make_policy(networks, experiment.environment_spec, evaluation=True)
    actor = make_actor(actor_key, policy, experiment.environment_spec, variable_source, None)
    evaluator_counter = Counter(counter, "evaluator", time_delta=0.0)
    loop = EnvironmentLoop(environment, actor, evaluator_counter, logger=None, should_update=False)
    logger = experiment.logger_factory("evaluator", "actor_steps", evaluator_id)
    return Evaluator(loop, logger, evaluator_counter)
