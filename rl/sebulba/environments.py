"""A sebulba run's host environments, by the fastest route that installs: Atari games in ale-py's vector
environment (its C++ threads), any other environment the experiment makes as dm_env copies stepped one after
another by their actor thread (an evaluation round's, many more, by worker processes where
`launcher.evaluation_processes` asks for them). Replica i's copies are seeded from its own seed, so each replica
steps the environments a run with that seed would."""

from __future__ import annotations

import os
from typing import Any, Callable

from rl.environments.atari import AleVector, make_atari_environment
from rl.environments.factories import factory_function
from rl.environments.host import DmEnvCopies, HostVector, copy_seeds
from rl.environments.host_processes import ProcessCopies
from rl.experiments.config import Experiment

# Salts of the seeds: training copies (per actor thread and session) and evaluation rounds (per step count).
TRAINING, EVALUATION = 0, 1


def is_atari(factory: Callable[..., Any]) -> bool:
    return factory_function(factory) is make_atari_environment


def host_vector(factory: Callable[..., Any], seeds: list[int], environment_threads: int | None = None) -> HostVector:
    """Copies of `factory`'s environment, one per seed: an Atari game in ale-py's vector environment (with
    `environment_threads` C++ threads; None: one per core), anything else as dm_env copies."""
    if is_atari(factory):
        threads = environment_threads or os.cpu_count() or 1
        return AleVector(seeds, threads, **factory.keywords)
    return DmEnvCopies.make(factory, seeds)


def replica_seeds(experiment: Experiment, replicas: int, copies: int, *salt: int) -> list[int]:
    """`copies` environment seeds for each of `replicas` replicas (replica-major), replica i's drawn from
    seed + i and `salt`."""
    return [
        int(seed) for replica in range(replicas) for seed in copy_seeds(experiment.seed + replica, *salt, count=copies)
    ]


def training_environments(
    experiment: Experiment, replicas: int, copies: int, thread: int, environment_threads: int | None
) -> HostVector:
    """Actor thread `thread`'s copies: `copies` of every replica, seeded anew in each session of the run. A
    thread steps its own (a few): worker processes were measured slower there (docs/sebulba.md)."""
    seeds = replica_seeds(experiment, replicas, copies, TRAINING, thread, experiment.session)
    return host_vector(experiment.environment_factory, seeds, environment_threads)


class EvaluationEnvironments:
    """`eval_episodes` copies of every replica for each evaluation round, without training-only preprocessing
    (Atari: whole games, unclipped), the round at `actor_steps` seeded by the replica's seed and the step count
    only; with `processes`, stepped by that many worker processes kept from round to round (new copies, the same
    processes), Atari excepted (ale-py's own threads step it)."""

    def __init__(self, experiment: Experiment, replicas: int, environment_threads: int | None, processes: int):
        self.experiment = experiment
        self.replicas = replicas
        self.environment_threads = environment_threads
        self.processes = processes
        self.kept: ProcessCopies | None = None

    def for_round(self, actor_steps: int) -> HostVector:
        """The round's copies; `done_with` them after the round."""
        experiment = self.experiment
        factory = experiment.evaluation_environment_factory or experiment.environment_factory
        seeds = replica_seeds(experiment, self.replicas, experiment.eval_episodes, EVALUATION, actor_steps)
        if self.processes > 0 and not is_atari(factory):
            if self.kept is None:
                self.kept = ProcessCopies(factory, seeds, self.processes)
            else:
                self.kept.reseed(seeds)
            return self.kept
        return host_vector(factory, seeds, self.environment_threads)

    def done_with(self, environments: HostVector) -> None:
        if environments is not self.kept:
            environments.close()

    def close(self) -> None:
        if self.kept is not None:
            self.kept.close()
            self.kept = None
