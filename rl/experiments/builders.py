"""Builds the nodes of an experiment (learner, actors, evaluators) the same way for every launcher."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import namedtuple
from typing import Any, Callable, Iterator, Sequence

import jax
import numpy as np

from rl import core
from rl.counting import Counter
from rl.environment_loop import EnvironmentLoop
from rl.environments.vector import VectorEnvironment
from rl.experiments.config import Experiment, enable_compilation_cache
from rl.loggers.base import Logger, NoOpLogger, TimeFilter
from rl.observers import Observer
from rl.systems.learning import SGDLearner

# Independent random keys for every node, derived from the experiment seed.
NodeKeys = namedtuple("NodeKeys", "learner actors evaluators")


def environment_seed(key: jax.Array) -> int:
    """A uint32 environment seed drawn from a JAX key."""
    return int(jax.random.bits(key, dtype=np.uint32))


def make_environment(
    experiment: Experiment,
    random_key: jax.Array,
    num_envs: int,
    observers: Sequence[Observer],
    evaluation: bool = False,
) -> Any:
    """`num_envs` copies seeded from `random_key`, rendering when an observer asks; evaluators play
    the evaluation environment where there is one."""
    factory = experiment.environment_factory
    seed = environment_seed(random_key)
    render = any(observer.render for observer in observers)
    if evaluation and experiment.evaluation_environment_factory is not None:
        factory = experiment.evaluation_environment_factory
    elif experiment.vector_environment_factory is not None and not render:
        return experiment.vector_environment_factory(seed=seed, num_envs=num_envs)
    if render:
        factory = functools.partial(factory, render_mode="rgb_array")
    return VectorEnvironment.make(factory, seed, num_envs)


def build_learner(
    experiment: Experiment,
    random_key: jax.Array,
    replay_client: Any,
    counter: Counter,
    log_filter: Callable[[Logger], Logger] | None = None,
    wrap_dataset: Callable[[Iterator[Any]], Iterator[Any]] | None = None,
) -> core.Learner:
    """The learner reading from replay (without a client it only serves restored parameters)."""
    enable_compilation_cache(experiment.compilation_cache)
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    if replay_client is None:
        dataset = iter(())
    else:
        dataset = experiment.builder.make_dataset_iterator(replay_client, experiment.environment_spec)
        if wrap_dataset is not None:
            dataset = wrap_dataset(dataset)
    logger = experiment.logger_factory("learner", "learner_steps")
    logger = TimeFilter(logger, experiment.learner_log_interval_s) if log_filter is None else log_filter(logger)
    learner_counter = Counter(counter, "learner")
    learning = experiment.builder.make_learning(networks)
    return SGDLearner(learning, random_key, dataset, replay_client, learner_counter, logger)


class StepLockReleasingIterator:
    """A learner's replay iterator that releases `lock` (held during each step) while it waits for
    a batch: whoever would insert what it waits for may be waiting for the lock (launcher=local's and
    launcher=ray's learners wrap their dataset in it, `build_learner`'s `wrap_dataset`)."""

    def __init__(self, iterator: Any, lock: threading.Lock):
        self._iterator = iterator
        self._lock = lock
        self.waiting_since: float | None = None
        self.batches = 0

    def __iter__(self) -> "StepLockReleasingIterator":
        return self

    def __next__(self) -> Any:
        self._lock.release()
        self.waiting_since = time.monotonic()
        try:
            batch = next(self._iterator)
            self.batches += 1
            return batch
        finally:
            self.waiting_since = None
            self._lock.acquire()

    def close(self) -> None:
        self._iterator.close()


def _loop_parts(experiment: Experiment, random_key: jax.Array, label: str, instance: int) -> tuple:
    enable_compilation_cache(experiment.compilation_cache)
    environment_key, actor_key = jax.random.split(random_key)
    observers = [
        factory(label=label, instance=instance, run_directory=experiment.run_directory)
        for factory in experiment.observers
    ]
    observers = [observer for observer in observers if observer.labels is None or label in observer.labels]
    evaluation = label == "evaluator"
    num_envs = experiment.eval_episodes if evaluation else experiment.num_envs
    environment = make_environment(experiment, environment_key, num_envs, observers, evaluation=evaluation)
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    return actor_key, observers, environment, networks


def build_actor(
    experiment: Experiment,
    random_key: jax.Array,
    replay: Any,
    variable_source: core.VariableSource,
    counter: Counter,
    actor_id: int,
) -> EnvironmentLoop:
    """A loop acting with the behaviour policy, writing to replay; only actor 0 logs episodes."""
    actor_key, observers, environment, networks = _loop_parts(experiment, random_key, "actor", actor_id)
    builder = experiment.builder
    spec = experiment.environment_spec
    policy = builder.make_actor_policy(networks, spec, actor_id)
    actor = builder.make_actor(actor_key, policy, spec, variable_source, builder.make_adder(replay, spec))
    logger: Logger = experiment.logger_factory("actor", "actor_steps", actor_id) if actor_id == 0 else NoOpLogger()
    return EnvironmentLoop(environment, actor, Counter(counter, "actor"), logger, observers)


def build_evaluator(
    experiment: Experiment,
    random_key: jax.Array,
    variable_source: core.VariableSource,
    counter: Counter,
    make_actor: Callable[..., core.Actor] | None = None,
    instance: int = 0,
) -> EnvironmentLoop:
    """A loop with the evaluation policy and no adder; a round plays `eval_episodes` side by side."""
    actor_key, observers, environment, networks = _loop_parts(experiment, random_key, "evaluator", instance)
    builder = experiment.builder
    spec = experiment.environment_spec
    policy = builder.make_policy(networks, spec, evaluation=True)
    actor = (make_actor or builder.make_actor)(actor_key, policy, spec, variable_source, None)
    logger = experiment.logger_factory("evaluator", "actor_steps", instance)
    counter = Counter(counter, "evaluator")
    return EnvironmentLoop(environment, actor, counter, logger, observers, evaluation=True)


@dataclasses.dataclass
class Evaluations:
    """One evaluator's rounds: (actor steps, mean return) and each round's epoch time."""

    returns: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    times: list[float] = dataclasses.field(default_factory=list)

    def evaluate(self, loop: EnvironmentLoop, num_episodes: int) -> float:
        record = loop.run_evaluation(num_episodes)
        self.returns.append((int(record.get("actor_steps", 0)), float(record["episode_return"])))
        self.times.append(loop.round_started_at)
        return float(record["episode_return"])


@dataclasses.dataclass
class NodeBuilder:
    """Builds each node of an experiment (learner, actors, evaluators) with its key, for whichever launcher
    runs them, in one process or many (`num_evaluators` per evaluator factory)."""

    experiment: Experiment
    num_actors: int = 1
    num_evaluators: int = 1

    @property
    def evaluator_factories(self) -> list[Callable[..., EnvironmentLoop]]:
        factories = self.experiment.evaluator_factories
        return list(factories) if factories is not None else [functools.partial(build_evaluator, self.experiment)]

    @property
    def evaluators(self) -> int:
        return self.num_evaluators * len(self.evaluator_factories)

    @property
    def keys(self) -> NodeKeys:
        enable_compilation_cache(self.experiment.compilation_cache)
        learner, actors, evaluators = jax.random.split(jax.random.PRNGKey(self.experiment.seed), 3)
        return NodeKeys(
            learner=learner,
            actors=tuple(jax.random.split(actors, self.num_actors)),
            evaluators=tuple(jax.random.split(evaluators, self.evaluators)),
        )

    def make_replay_tables(self) -> list[Any]:
        return self.experiment.builder.make_replay_tables(self.experiment.environment_spec)

    def make_replay_server(self, path: str | None, fallback: str | None, port: int | None = None) -> tuple:
        """A reverb server of the tables on `port` (None: a free one), checkpointing to `path` (None: not at
        all) from the checkpoint `fallback`, and a client of it."""
        import reverb

        from rl.replay.server import make_server

        checkpointer = path and reverb.checkpointers.DefaultCheckpointer(path, fallback_checkpoint_path=fallback)
        server = make_server(self.make_replay_tables(), port, checkpointer)
        return server, reverb.Client(f"localhost:{server.port}")

    def make_learner(self, replay_client: Any, counter: Any, **options: Any) -> core.Learner:
        """The learner with its key; `options` are `build_learner`'s `log_filter` and `wrap_dataset`."""
        return build_learner(self.experiment, self.keys.learner, replay_client, counter, **options)

    def actor_key(self, actor_id: int, restart: int = 0) -> jax.Array:
        """Actor `actor_id`'s key after `restart` restarts: a rebuilt actor does not replay its exploration."""
        if restart < 0:
            raise ValueError(f"restart must be >= 0, got {restart}")
        key = self.keys.actors[actor_id]
        return key if restart == 0 else jax.random.fold_in(key, restart)

    def make_actor(
        self,
        actor_id: int,
        replay_client: Any,
        variable_source: core.VariableSource,
        counter: Any,
        restart: int = 0,
        initial_step: int = 0,
    ) -> EnvironmentLoop:
        """Actor `actor_id`'s loop, its schedules resumed at `initial_step`."""
        loop = build_actor(
            self.experiment, self.actor_key(actor_id, restart), replay_client, variable_source, counter, actor_id
        )
        loop.actor.step_count = initial_step
        return loop

    def make_evaluator(self, instance: int, variable_source: core.VariableSource, counter: Any) -> EnvironmentLoop:
        factory = self.evaluator_factories[instance // self.num_evaluators]
        return factory(
            self.keys.evaluators[instance],
            variable_source,
            counter,
            self.experiment.builder.make_actor,
            instance=instance,
        )
