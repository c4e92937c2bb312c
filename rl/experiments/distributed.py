"""The nodes of an experiment and how they are wired, independent of any launcher.

    replay ◀─inserts── actor_i ──params?──▶ learner ──samples──▶ replay
    counter ◀─counts── every node;   evaluator_j ──params?──▶ learner

`run_local` builds these nodes in one process, the Ray launcher each in its own process
and scripts/evaluate.py the learner and an evaluator, all from this description: the
same nodes with the same keys, evaluated at the same actor steps (rl/experiments/lifecycle.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from rl import core
from rl.counting import Counter
from rl.environment_loop import EnvironmentLoop
from rl.experiments.builders import build_actor, build_learner, evaluator_factories
from rl.experiments.compilation import enable_compilation_cache
from rl.experiments.config import ExperimentConfig


@dataclasses.dataclass(frozen=True)
class NodeKeys:
    """Independent random keys for every node, all derived from the experiment seed."""

    learner: jax.Array
    actors: tuple[jax.Array, ...]
    evaluators: tuple[jax.Array, ...]


@dataclasses.dataclass
class Evaluations:
    """One evaluator's rounds: (actor steps, mean return) and the epoch time each took
    its parameters."""

    returns: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    times: list[float] = dataclasses.field(default_factory=list)

    def evaluate(self, loop: EnvironmentLoop, num_episodes: int) -> float:
        """Runs a round of `loop` (`EnvironmentLoop.run_evaluation`) and keeps it; returns
        its mean return."""
        record = loop.run_evaluation(num_episodes)
        self.returns.append((int(record.get("actor_steps", 0)), float(record["episode_return"])))
        self.times.append(loop.round_started_at)
        return float(record["episode_return"])


@dataclasses.dataclass
class DistributedProgram:
    """`num_actors` actors and `num_evaluators` evaluators of each evaluator factory
    (`evaluators` in all), numbered factory by factory."""

    experiment: ExperimentConfig
    num_actors: int = 1
    num_evaluators: int = 1

    def __post_init__(self) -> None:
        if self.num_actors < 1:
            raise ValueError(f"num_actors must be >= 1, got {self.num_actors}")
        if self.num_evaluators < 1:
            raise ValueError(f"num_evaluators must be >= 1, got {self.num_evaluators}")

    @property
    def evaluators(self) -> int:
        return self.num_evaluators * len(evaluator_factories(self.experiment))

    @property
    def keys(self) -> NodeKeys:
        # Often a node's first compilation (in a Ray node, unpickled): the cache goes first.
        enable_compilation_cache(self.experiment.compilation_cache)
        learner, actors, evaluators = jax.random.split(jax.random.PRNGKey(self.experiment.seed), 3)
        return NodeKeys(
            learner=learner,
            actors=tuple(jax.random.split(actors, self.num_actors)),
            evaluators=tuple(jax.random.split(evaluators, self.evaluators)),
        )

    def make_replay_tables(self) -> list[Any]:
        return self.experiment.builder.make_replay_tables(self.experiment.environment_spec)

    def make_counter(self) -> Counter:
        return Counter()

    def make_learner(
        self, replay_client: Any, counter: Any, log_filter: Any = None, wrap_dataset: Any = None
    ) -> core.Learner:
        return build_learner(self.experiment, self.keys.learner, replay_client, counter, log_filter, wrap_dataset)

    def actor_key(self, actor_id: int, restart: int = 0) -> jax.Array:
        """Actor `actor_id`'s key after `restart` restarts.

        The first start uses the actor's own key; each restart folds the restart count
        into it, so a rebuilt actor neither replays its exploration nor reuses its
        environment seed, and the run stays determined by seed, actor id and restarts.
        """
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
        """Actor `actor_id`'s loop; a restarted one gets a fresh key (`actor_key`) and
        resumes its schedules at `initial_step`, the steps it had counted before."""
        key = self.actor_key(actor_id, restart)
        loop = build_actor(self.experiment, key, replay_client, variable_source, counter, actor_id)
        if initial_step:
            loop.actor.step_count = initial_step
        return loop

    def make_evaluator(self, instance: int, variable_source: core.VariableSource, counter: Any) -> EnvironmentLoop:
        """Evaluator `instance`: from factory `instance // num_evaluators`, with its own key."""
        factory = evaluator_factories(self.experiment)[instance // self.num_evaluators]
        key = self.keys.evaluators[instance]
        return factory(key, variable_source, counter, self.experiment.builder.make_actor, instance=instance)
