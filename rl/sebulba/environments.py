"""A sebulba run's host environments, by the fastest route that installs: Atari games in ale-py's vector
environment (its C++ threads), any other environment the experiment makes as dm_env copies stepped one after
another by their actor thread. Replica i's copies are seeded from its own seed, so each replica steps the
environments a run with that seed would."""

from __future__ import annotations

import os
from typing import Any, Callable

from rl.environments.atari import AleVector, make_atari_environment
from rl.environments.factories import factory_function
from rl.environments.host import DmEnvCopies, HostVector, copy_seeds
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
    """Actor thread `thread`'s copies: `copies` of every replica, seeded anew in each session of the run."""
    seeds = replica_seeds(experiment, replicas, copies, TRAINING, thread, experiment.session)
    return host_vector(experiment.environment_factory, seeds, environment_threads)


def evaluation_environments(
    experiment: Experiment, replicas: int, actor_steps: int, environment_threads: int | None
) -> HostVector:
    """`eval_episodes` copies of every replica for the round at `actor_steps`, without training-only
    preprocessing (Atari: whole games, unclipped); seeded by the replica's seed and the step count only."""
    factory = experiment.evaluation_environment_factory or experiment.environment_factory
    seeds = replica_seeds(experiment, replicas, experiment.eval_episodes, EVALUATION, actor_steps)
    return host_vector(factory, seeds, environment_threads)
