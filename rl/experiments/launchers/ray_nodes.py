"""The Ray actors that host an experiment's nodes, and the proxies nodes talk through.

Each node builds its part of the experiment from the shared `DistributedProgram`, so the
agents know nothing about Ray: a remote learner looks like a `VariableSource`, the remote
counter like a `Counter` parent and the driver's loggers like a logger factory.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Sequence

import jax
import numpy as np
import ray

from rl import core
from rl.counting import Counter, StepBudget
from rl.experiments.distributed import DistributedProgram, Evaluations
from rl.loggers.base import Logger, LoggingData, to_python_scalar

# Steps an actor leases from the counter at once: bounds counter traffic, and the total
# never exceeds max_actor_steps because the counter grants only what is left. An actor
# counts its steps at every lease boundary, so one that dies loses at most this many
# uncounted steps, and the counter returns them to the budget when it restarts.
STEP_LEASE = 100


class RemoteCounter:
    """A `Counter` parent living in the counter node; increments are batched.

    Increments are sent at most every `flush_interval_s` (and on `flush`), so a learner
    counting every step does not pay a round trip per step.
    """

    def __init__(self, handle: Any, flush_interval_s: float = 0.5):
        self._handle = handle
        self._flush_interval_s = flush_interval_s
        self._pending: dict[str, float] = {}
        self._counts: dict[str, float] = {}
        self._last_flush = 0.0
        self._lock = threading.Lock()

    def increment(self, **counts: float) -> dict[str, float]:
        with self._lock:
            for key, value in counts.items():
                self._pending[key] = self._pending.get(key, 0) + value
        if time.monotonic() - self._last_flush >= self._flush_interval_s:
            return self.flush()
        with self._lock:
            merged = dict(self._counts)
            for key, value in self._pending.items():
                merged[key] = merged.get(key, 0) + value
        return merged

    def flush(self) -> dict[str, float]:
        with self._lock:
            pending, self._pending = self._pending, {}
        self._counts = self._send(pending)
        self._last_flush = time.monotonic()
        return dict(self._counts)

    def _send(self, pending: dict[str, float]) -> dict[str, float]:
        return ray.get(self._handle.increment.remote(**pending))

    def get_counts(self) -> dict[str, float]:
        return self.flush()


class ActorStepCounter(RemoteCounter):
    """An actor incarnation's counts: its steps are charged to its lease, and the counter
    node drops them if this incarnation has been replaced (it died and was restarted)."""

    def __init__(self, handle: Any, actor_id: int, incarnation: int):
        super().__init__(handle, flush_interval_s=0.0)
        self._actor_id = actor_id
        self._incarnation = incarnation

    def _send(self, pending: dict[str, float]) -> dict[str, float]:
        return ray.get(self._handle.increment_actor.remote(self._actor_id, self._incarnation, pending))


class RemoteVariableSource(core.VariableSource):
    """The learner's parameters, seen from another process.

    Asynchronous (for actors): returns the newest parameters already received and asks
    for fresher ones in the background, so acting never waits; only the first call
    blocks. Synchronous (for evaluators): every call fetches the current parameters.
    """

    def __init__(self, learner_handle: Any, asynchronous: bool = True):
        self._learner = learner_handle
        self._asynchronous = asynchronous
        self._latest: list[Any] | None = None
        self._pending: Any = None

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        if self._latest is None or not self._asynchronous:
            self._latest = ray.get(self._learner.get_variables.remote(list(names)))
            return self._latest
        if self._pending is not None:
            ready, _ = ray.wait([self._pending], timeout=0)
            if ready:
                self._latest = ray.get(self._pending)
                self._pending = None
        if self._pending is None:
            self._pending = self._learner.get_variables.remote(list(names))
        return self._latest


class QueueLogger(Logger):
    """Sends records to the driver, which owns the CSV files and the wandb run.

    With the run's `start_time` (epoch seconds) each record is stamped with its
    `wall_time_s` here, when it is made, not when the driver writes it.
    """

    def __init__(
        self, queue: Any, label: str, steps_key: str | None, instance: int | None, start_time: float | None = None
    ):
        self._queue = queue
        self._key = (label, steps_key, instance)
        self._start_time = start_time

    def write(self, data: LoggingData) -> None:
        row = {key: to_python_scalar(value) for key, value in data.items()}
        if self._start_time is not None:
            row.setdefault("wall_time_s", round(time.time() - self._start_time, 3))
        self._queue.put_nowait((self._key, row))


class QueueLoggerFactory:
    def __init__(self, queue: Any, start_time: float | None = None):
        self._queue = queue
        self._start_time = start_time

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        return QueueLogger(self._queue, label, steps_key, instance, self._start_time)


@ray.remote(num_cpus=0)
class ReplayNode:
    def __init__(self, program: DistributedProgram):
        import reverb

        self._server = reverb.Server(program.make_replay_tables(), port=None)
        self._address = f"{ray.util.get_node_ip_address()}:{self._server.port}"

    def address(self) -> str:
        return self._address

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class CounterNode:
    """The root counter, and the keeper of the actor-step budget (`StepBudget`)."""

    def __init__(self, max_actor_steps: int):
        self._counter = Counter()
        self._budget = StepBudget(max_actor_steps)

    def increment(self, **counts: float) -> dict[str, float]:
        return self._counter.increment(**counts)

    def get_counts(self) -> dict[str, float]:
        return self._counter.get_counts()

    def register_actor(self, actor_id: int) -> dict[str, int]:
        return self._budget.register(actor_id)

    def lease_steps(self, actor_id: int, incarnation: int, wanted: int) -> int:
        return self._budget.lease(actor_id, incarnation, wanted)

    def increment_actor(self, actor_id: int, incarnation: int, counts: dict[str, float]) -> dict[str, float]:
        """An actor's counts; a replaced incarnation's are dropped (its lease was reclaimed)."""
        if self._budget.count(actor_id, incarnation, int(counts.get("actor_steps", 0))):
            return self._counter.increment(**counts)
        return self._counter.get_counts()

    def budget(self) -> dict[str, Any]:
        return self._budget.state()

    def pid(self) -> int:
        return os.getpid()


@ray.remote(max_concurrency=4)
class LearnerNode:
    """Steps the learner on its own thread and serves parameters as numpy arrays."""

    def __init__(self, program: DistributedProgram, replay_address: str, counter_handle: Any):
        import reverb

        self._counter = RemoteCounter(counter_handle)
        self._learner = program.make_learner(reverb.Client(replay_address), self._counter)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._params: dict[str, Any] = {}
        self._version = 0
        self._served_version = -1

    def run(self) -> int:
        """Runs until `stop`; returns the number of learner steps taken.

        Once the actors stop inserting, a step can block on the rate limiter for good;
        the driver then stops waiting for this call and shuts the process down.
        """
        steps = 0
        while not self._stop.is_set():
            self._learner.step()
            steps += 1
            self._version += 1
        self._counter.flush()
        return steps

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        with self._lock:
            if self._served_version != self._version:
                self._params = {}
                self._served_version = self._version
            for name in names:
                if name not in self._params:
                    self._params[name] = jax.device_get(self._learner.get_variables([name])[0])
            return [self._params[name] for name in names]

    def save(self) -> Any:
        return jax.tree_util.tree_map(np.asarray, self._learner.save())

    def flush_counts(self) -> None:
        self._counter.flush()

    def stop(self) -> None:
        self._stop.set()

    def pid(self) -> int:
        return os.getpid()


@ray.remote
class ActorNode:
    """Acts until the counter's step budget is spent.

    Ray rebuilds it after a fault by running `__init__` again: registering with the
    counter returns the lease of the dead incarnation to the budget and gives the
    restart count (for a fresh key) and the steps counted so far (where schedules resume).
    """

    def __init__(
        self,
        program: DistributedProgram,
        actor_id: int,
        replay_address: str,
        learner_handle: Any,
        counter_handle: Any,
    ):
        import reverb

        self._actor_id = actor_id
        self._counter_handle = counter_handle
        self._start = ray.get(counter_handle.register_actor.remote(actor_id))
        self._incarnation = self._start["restart"]
        self._loop = program.make_actor(
            actor_id,
            reverb.Client(replay_address),
            RemoteVariableSource(learner_handle),
            ActorStepCounter(counter_handle, actor_id, self._incarnation),
            restart=self._incarnation,
            initial_step=self._start["steps"],
        )

    def run(self) -> int:
        """Acts lease by lease until the budget is spent; returns the steps taken."""
        steps = 0
        while True:
            # Count the spent lease's steps (an unfinished episode's too) before the next.
            self._loop.count_partial_episode()
            lease = ray.get(self._counter_handle.lease_steps.remote(self._actor_id, self._incarnation, STEP_LEASE))
            if lease == 0:
                break
            self._loop.run_steps(lease)  # Exactly `lease` environment steps, all copies together.
            steps += lease
        adder = getattr(self._loop.actor, "adder", None)
        if adder is not None:
            adder.reset()
        return steps

    def start_info(self) -> dict[str, int]:
        """This incarnation's `restart` count, the `steps` its schedules resumed at and
        the steps `reclaimed` from its predecessor's lease."""
        return dict(self._start)

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class EvaluatorNode:
    """Runs an evaluation round whenever the driver asks (every `eval_every` actor steps)."""

    def __init__(self, program: DistributedProgram, instance: int, learner_handle: Any, counter_handle: Any):
        self._loop = program.make_evaluator(
            instance,
            RemoteVariableSource(learner_handle, asynchronous=False),
            RemoteCounter(counter_handle, 0.0),
        )
        self._evaluations = Evaluations()

    def evaluate(self, eval_episodes: int) -> float:
        return self._evaluations.evaluate(self._loop, eval_episodes)

    def returns(self) -> list[tuple[int, float]]:
        return self._evaluations.returns

    def times(self) -> list[float]:
        return self._evaluations.times

    def pid(self) -> int:
        return os.getpid()
