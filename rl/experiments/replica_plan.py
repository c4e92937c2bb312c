"""What a compiled run's replicas are, handed to its nodes as data: how many, a grid group's own experiments and
hyperparameters, each replica's hooks (a search's pruner), the memory limits of a program and a population to
train (PBT). The searches that make a plan live above the launchers (rl/sweeps/); the nodes and their replica
layer (rl/experiments/replicas.py) only act on what it says."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from rl.experiments.config import Experiment
from rl.experiments.hooks import RunHook


@dataclasses.dataclass(frozen=True)
class MemoryLimits:
    """`max_replicas_per_program` (None: as many as fit) and the memory a program may hold on each device in
    GiB (`per_device_gb`; None: MARGIN of the device's free memory)."""

    max_replicas_per_program: int | None = None
    per_device_gb: float | None = None


class Population(Protocol):
    """A population the replicas train as (rl/sweeps/pbt.py's): its members' present hyperparameters, the
    exchange after an evaluation round and what a checkpoint and the summaries keep of it."""

    values: dict[str, np.ndarray]  # "agent.<field>" or "policy.<field>" -> one value per member.
    lineage: list[list[dict[str, Any]]]  # Each member's exchanges so far.

    def due(self, steps: int, eval_every: int, max_actor_steps: int) -> bool: ...

    def exchange(self, steps: int, fitness: np.ndarray) -> np.ndarray:
        """Sets the new values; returns each member's parent, whose learner state the member takes."""
        ...

    def record(self, member: int, copied_from: int) -> dict[str, Any]:
        """`member`'s record after a round (its values, whose learner state it holds), for logs/pbt.csv."""
        ...

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...

    def best(self, finals: Sequence[float]) -> dict[str, Any]: ...


class PopulationSearch(Protocol):
    """A population-based search as settings: `check` refuses an experiment its members cannot search (a
    ConfigError), `start` gives a run its population, the same every time."""

    def check(self, experiment: Experiment) -> None: ...

    def start(self) -> Population: ...


@dataclasses.dataclass(frozen=True)
class ReplicaPlan:
    """`num_seeds` replicas of the run's experiment (replica i: seed + i), or a grid group's `replicas` (their own
    experiments) with `hyperparameters` ("agent.<field>" or "policy.<field>" -> one value per replica) and
    `summary_fields` added to their summaries; `replica_hooks[i]`: replica i's hooks, told each of its evaluation
    rounds (one that ends it early masks it: a search's pruner); `memory`: how many replicas a program may hold
    (launcher=anakin: rl/anakin/groups.py); `population`: the replicas train as one population, its values their hyperparameters;
    `replica_checkpoints`: each replica that finishes writes its final state as the checkpoint of its own run (a
    grid job's, which scripts/evaluate.py reads as a one-replica launcher=anakin run's)."""

    num_seeds: int = 1
    replicas: tuple[Experiment, ...] | None = None
    hyperparameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary_fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    replica_hooks: tuple[tuple[RunHook, ...], ...] = ()
    memory: MemoryLimits = MemoryLimits()
    population: PopulationSearch | None = None
    replica_checkpoints: bool = False

    @property
    def count(self) -> int:
        """The replicas: a grid group's jobs, else `num_seeds`."""
        return self.num_seeds if self.replicas is None else len(self.replicas)

    @property
    def own_records(self) -> bool:
        """Each replica writes its own run's records (a plain one-replica run writes the run's)."""
        return self.replicas is not None or self.num_seeds > 1

    def hooks_of(self, replica: int) -> tuple[RunHook, ...]:
        return self.replica_hooks[replica] if replica < len(self.replica_hooks) else ()
