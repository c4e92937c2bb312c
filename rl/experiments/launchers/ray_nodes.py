"""The Ray actors that host an experiment's nodes, and the proxies nodes talk through.

Each node builds its part from the shared `DistributedProgram`, so the agents know
nothing about Ray: the learner looks like a `VariableSource`, the counter node like a
`Counter` parent and the driver's loggers like a logger factory. Nodes find each other
by name: a plain string stays in a node's creation task, where a restart finds it (a
handle would sit in the object store, and Ray warns on every run).
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
import uuid
from typing import Any, Sequence

import jax
import numpy as np
import ray

from rl import checkpointing, core
from rl.counting import Counter, StepBudget
from rl.experiments.builders import DistributedProgram, Evaluations
from rl.experiments.learner_thread import StepLockReleasingIterator
from rl.loggers.base import Logger, LoggerFactory, LoggingData, to_python_scalar
from rl.replay.adders import ReplayTimeoutError

# Steps an actor leases from the counter at once: bounds counter traffic; the counter
# grants only what is left, and returns a dead actor's uncounted lease to the budget.
STEP_LEASE = 100
HELD_POLL_S = 0.02  # How often an actor held at an evaluation point asks whether it may go on.
REPLAY_RECONNECTS = 2  # New replay connections per lease before a write that keeps timing out fails.
REPLAY_ADDRESS_TIMEOUT_S = 300.0  # The replay node imports reverb and starts its server first.
REPLAY_PROBE_TIMEOUT_S = 1.0  # A probe of the replay node's incarnation between two write slices.


class RemoteCounter:
    """A `Counter` parent living in the counter node. Increments are sent at most every
    `flush_interval_s` (and on `flush`): the learner does not pay a round trip per step."""

    def __init__(self, handle: Any, flush_interval_s: float = 0.5):
        self._handle = handle
        self._flush_interval_s = flush_interval_s
        self._pending: collections.Counter = collections.Counter()
        self._counts: dict[str, float] = {}
        self._last_flush = 0.0
        self._lock = threading.Lock()

    def increment(self, **counts: float) -> dict[str, float]:
        with self._lock:
            self._pending.update(counts)
        if time.monotonic() - self._last_flush >= self._flush_interval_s:
            return self.flush()
        with self._lock:
            merged = collections.Counter(self._counts)
            merged.update(self._pending)
        return dict(merged)

    def flush(self) -> dict[str, float]:
        with self._lock:
            pending, self._pending = self._pending, collections.Counter()
        self._counts = self._send(dict(pending))
        self._last_flush = time.monotonic()
        return dict(self._counts)

    def _send(self, pending: dict[str, float]) -> dict[str, float]:
        return ray.get(self._handle.increment.remote(**pending))

    def get_counts(self) -> dict[str, float]:
        return self.flush()


class ActorStepCounter(RemoteCounter):
    """An actor incarnation's counts, charged to its lease: the counter node drops them
    once this incarnation has been replaced (it died and was restarted)."""

    def __init__(self, handle: Any, actor_id: int, incarnation: int):
        super().__init__(handle, flush_interval_s=0.0)
        self._actor_id = actor_id
        self._incarnation = incarnation

    def _send(self, pending: dict[str, float]) -> dict[str, float]:
        return ray.get(self._handle.increment_actor.remote(self._actor_id, self._incarnation, pending))


class RemoteVariableSource(core.VariableSource):
    """The learner's parameters, seen from another process.

    Asynchronous (actors): the newest parameters already received, fresher ones asked
    for in the background, so only the first call blocks. Synchronous (evaluators): the
    current parameters. A learner Ray is restarting is waited for: an asynchronous
    source acts on what it has and asks again every `retry_interval_s`; a blocking call
    retries until `timeout_s`, then raises a `TimeoutError` naming the learner and call.
    """

    def __init__(
        self, learner: Any, asynchronous: bool = True, timeout_s: float = 300.0, retry_interval_s: float = 1.0
    ):
        self._learner = learner
        self._asynchronous = asynchronous
        self._timeout_s = timeout_s
        self._retry_interval_s = retry_interval_s
        self._latest: list[Any] | None = None
        self._pending: Any = None
        self._retry_at = 0.0

    def _fetch(self, names: list[str]) -> list[Any]:
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return ray.get(self._learner.get_variables.remote(names), timeout=max(0.1, deadline - time.monotonic()))
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                pass  # Dead, restarting, or restarted and not yet restored: ask again.
            if time.monotonic() >= deadline:
                raise TimeoutError(f"learner.get_variables did not answer within {self._timeout_s:g} s")
            time.sleep(self._retry_interval_s)

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        names = list(names)
        if self._latest is None or not self._asynchronous:
            self._latest = self._fetch(names)
            return self._latest
        if self._pending is not None and ray.wait([self._pending], timeout=0)[0]:
            try:
                self._latest = ray.get(self._pending)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                self._retry_at = time.monotonic() + self._retry_interval_s  # Keep acting on what we have.
            self._pending = None
        if self._pending is None and time.monotonic() >= self._retry_at:
            self._pending = self._learner.get_variables.remote(names)
        return self._latest


class QueueLogger(Logger):
    """Sends records to the driver, which owns the CSV files and the W&B run. With the
    run's `start_time` (epoch seconds) a record's `wall_time_s` is stamped when it is made."""

    def __init__(self, queue: Any, key: tuple, start_time: float | None):
        self._queue = queue
        self._key = key
        self._start_time = start_time

    def write(self, data: LoggingData) -> None:
        row = {key: to_python_scalar(value) for key, value in data.items()}
        if self._start_time is not None:
            row.setdefault("wall_time_s", round(time.time() - self._start_time, 3))
        ray.get(self._queue.put_nowait.remote((self._key, row)))  # Raises when the queue is full.


class QueueLoggerFactory(LoggerFactory):
    """Loggers sending to the driver's `ray.util.queue.Queue` named `queue_name`."""

    def __init__(self, queue_name: str, start_time: float | None = None):
        self._queue_name = queue_name
        self.start_time = start_time

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        return QueueLogger(ray.get_actor(self._queue_name), (label, steps_key, instance), self.start_time)


def node_names() -> dict[str, str]:
    """Names of this run's replay, counter, learner and log queue, unique to the run."""
    token = uuid.uuid4().hex[:12]
    return {node: f"rl-{node.replace('_', '-')}-{token}" for node in ("replay", "counter", "learner", "log_queue")}


def watched_replay_client(replay: str) -> Any:
    """A reverb client of the replay node that knows the incarnation (pid) it connected
    to: a writer waiting on it learns within seconds that Ray restarted the node, rather
    than waiting out its bound for items the dead server never confirmed."""
    from rl.replay.server import WatchedClient

    handle = ray.get_actor(replay)
    start = ray.get(handle.start_info.remote(), timeout=REPLAY_ADDRESS_TIMEOUT_S)

    def replaced() -> bool:
        try:
            return ray.get(handle.pid.remote(), timeout=REPLAY_PROBE_TIMEOUT_S) != start["pid"]
        except ray.exceptions.GetTimeoutError:
            return False  # Restarting, or a busy machine: not known yet; the next slice asks again.
        except ray.exceptions.RayActorError:
            return True  # Gone for good: the driver ends the run.

    return WatchedClient(start["address"], replaced)


class _Node:
    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0, max_concurrency=4)
class ReplayNode(_Node):
    """The reverb server; with `checkpoint_directory` it checkpoints its tables there,
    starting from `fallback_checkpoint`. Its port is the first one the counter node was
    offered, so an incarnation Ray rebuilt after a fault listens on the same address
    (writers and the learner's dataset reconnect by themselves), with the tables of the
    run's newest checkpoint that holds them, or empty."""

    def __init__(self, program: DistributedProgram, directory: str | None, fallback: str | None, counter: str):
        import reverb

        from rl.replay.server import make_server

        with socket.socket() as probe:  # A port free on this machine now.
            probe.bind(("", 0))
            proposed = probe.getsockname()[1]
        port = ray.get(ray.get_actor(counter).replay_port.remote(proposed), timeout=REPLAY_ADDRESS_TIMEOUT_S)
        checkpointer = None
        if directory is not None:
            if ray.get_runtime_context().was_current_actor_reconstructed:
                saved = map(checkpointing.replay_of, checkpointing.list_checkpoints(program.experiment.run_directory))
                fallback = next(filter(os.path.isdir, saved), fallback)  # Newest first.
            checkpointer = reverb.checkpointers.DefaultCheckpointer(directory, fallback_checkpoint_path=fallback)
        self._server = make_server(program.make_replay_tables(), port=port, checkpointer=checkpointer)
        self._client = reverb.Client(f"localhost:{self._server.port}")
        self._start = {
            "pid": os.getpid(),
            "address": f"{ray.util.get_node_ip_address()}:{self._server.port}",
            "restored": fallback if directory is not None else None,
            "items": int(sum(info.current_size for info in self._client.server_info(timeout=60).values())),
        }

    def start_info(self) -> dict[str, Any]:
        """This incarnation's `pid`, `address`, the replay checkpoint it `restored`
        (None: none) and the `items` its tables held when it started."""
        return dict(self._start)

    def serve(self) -> None:
        """Never returns: the driver keeps it in flight to learn of a death."""
        threading.Event().wait()

    def checkpoint(self) -> str:
        """Checkpoints the tables; returns the directory reverb wrote."""
        return self._client.checkpoint()


@ray.remote(num_cpus=0)
class CounterNode(_Node):
    """The root counter, and the keeper of the actor-step budget (`StepBudget`): what the
    restored `counts` leave of `max_actor_steps`. Each actor's `schedule_steps` from the
    checkpoint are added to what it counts in this session (where its schedules resume);
    actor keys of session `s` start at `s * key_stride`, so no session replays another's."""

    def __init__(self, max_actor_steps: int, counts: dict, schedule_steps: dict[int, int], session: int, stride: int):
        self._counter = Counter()
        self._counter.restore(counts)
        self._done = int(counts.get("actor_steps", 0))
        self._budget = StepBudget(max(0, max_actor_steps - self._done))
        self._schedule_steps = schedule_steps
        self._key_offset = session * stride
        self._closed = False
        self._replay_port: int | None = None

    def increment(self, **counts: float) -> dict[str, float]:
        return self._counter.increment(**counts)

    def get_counts(self) -> dict[str, float]:
        return self._counter.get_counts()

    def register_actor(self, actor_id: int) -> dict[str, int]:
        start = self._budget.register(actor_id)
        start["steps"] += self._schedule_steps.get(actor_id, 0)
        start["key"] = self._key_offset + start["restart"]
        return start

    def lease_steps(self, actor_id: int, incarnation: int, wanted: int) -> int:
        """Up to `wanted` steps; 0: the budget is spent (or the run stops); -1: wait for
        the evaluation at the current point (`hold_until`)."""
        return 0 if self._closed else self._budget.lease(actor_id, incarnation, wanted)

    def hold_until(self, actor_steps: int) -> None:
        """Actors step only until the count reaches `actor_steps` (the next evaluation
        point), so evaluations sit at the same steps as a local run's."""
        self._budget.hold_at(int(actor_steps) - self._done)

    def increment_actor(self, actor_id: int, incarnation: int, counts: dict[str, float]) -> dict[str, float]:
        """An actor's counts; a replaced incarnation's are dropped (its lease was reclaimed)."""
        if self._budget.count(actor_id, incarnation, int(counts.get("actor_steps", 0))):
            return self._counter.increment(**counts)
        return self._counter.get_counts()

    def close(self) -> None:
        """Grants no more leases: each actor ends after the lease it holds (a clean stop)."""
        self._closed = True

    def budget(self) -> dict[str, Any]:
        """`StepBudget.state`, `counted` holding each actor's steps of every session."""
        state = self._budget.state()
        counted = collections.Counter(self._schedule_steps)
        counted.update(state["counted"])
        return state | {"counted": dict(counted)}

    def snapshot(self) -> dict[str, Any]:
        """The counts and each actor's schedule step, at one moment."""
        return {"counts": self._counter.get_counts(), "schedule_steps": self.budget()["counted"]}

    def replay_port(self, proposed: int) -> int:
        """The replay node's port: the first one proposed, for every incarnation."""
        if self._replay_port is None:
            self._replay_port = int(proposed)
        return self._replay_port

    def set_learner_steps(self, steps: int) -> int:
        """Sets `learner_steps` back to a restored learner's; returns the count it replaces."""
        counts = self._counter.get_counts()
        previous = int(counts.get("learner_steps", 0))
        self._counter.restore(counts | {"learner_steps": int(steps)})
        return previous


@ray.remote(max_concurrency=4)
class LearnerNode(_Node):
    """Steps the learner on its own thread and serves parameters as numpy arrays. Each
    step holds a lock, released while it waits for replay, so `checkpoint` reads state
    and counts between two steps. Rebuilt by Ray after a fault, it serves nothing
    (callers wait) until the driver has `restore`d the last checkpoint's state into it."""

    def __init__(self, program: DistributedProgram, replay: str, counter: str):
        import reverb

        start = ray.get(ray.get_actor(replay).start_info.remote(), timeout=REPLAY_ADDRESS_TIMEOUT_S)
        self._counter_handle = ray.get_actor(counter)
        self._counter = RemoteCounter(self._counter_handle)
        self._step_lock = threading.Lock()
        self._learner = program.make_learner(
            reverb.Client(start["address"]),
            self._counter,
            wrap_dataset=lambda dataset: StepLockReleasingIterator(dataset, self._step_lock),
        )
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._params: dict[str, Any] = {}
        self._version = 0
        self._served_version = -1
        self._ready = threading.Event()
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            self._ready.set()

    def run(self) -> int:
        """Steps until `stop`; returns the steps taken. (Once the actors stop inserting, a
        step can block on the rate limiter for good: the driver stops waiting for it.)"""
        self._ready.wait()
        steps = 0
        while not self._stop.is_set():
            with self._step_lock:
                self._learner.step()
                self._version += 1
            steps += 1
        self._counter.flush()
        return steps

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        if not self._ready.wait(timeout=10.0):
            raise RuntimeError("the learner is being restored")
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

    def checkpoint(self) -> dict[str, Any]:
        """Between two steps: the learner's `state` (numpy), checked finite, the root's
        `counts` (every learner step sent) and the actors' `schedule_steps`."""
        with self._step_lock:
            self._learner.check_finite()
            self._counter.flush()
            snapshot = ray.get(self._counter_handle.snapshot.remote(), timeout=60)
            return snapshot | {"state": self.save()}

    def restore(self, state: Any) -> str:
        """Continues from `state` (None: the initial state), then serves again; returns
        the sha256 of the state it now holds (`checkpointing.state_digest`)."""
        with self._step_lock:
            if state is not None:
                self._learner.restore(state)
                self._version += 1
            leaves = jax.tree_util.tree_leaves(jax.device_get(self._learner.save()))
        self._ready.set()
        return checkpointing.state_digest(leaves)

    def stop(self) -> None:
        self._stop.set()


@ray.remote
class ActorNode(_Node):
    """Acts until the counter's step budget is spent. Rebuilt by Ray after a fault, it
    registers again: the dead incarnation's lease returns to the budget, and the counter
    gives the restart count, a fresh key and the steps counted so far (where schedules
    resume)."""

    def __init__(self, program: DistributedProgram, actor_id: int, replay: str, learner: str, counter: str):
        self._program = program
        self._replay = replay
        self._actor_id = actor_id
        self._counter = ray.get_actor(counter)
        self._start = ray.get(self._counter.register_actor.remote(actor_id))
        self._loop = program.make_actor(
            actor_id,
            watched_replay_client(replay),
            RemoteVariableSource(ray.get_actor(learner)),
            ActorStepCounter(self._counter, actor_id, self._start["restart"]),
            restart=self._start["key"],
            initial_step=self._start["steps"],
        )

    def run(self) -> int:
        """Acts lease by lease until the budget is spent; returns the steps taken."""
        steps = 0
        while True:
            self._loop.count_partial_episode()  # The spent lease's steps counted before the next.
            lease = ray.get(self._counter.lease_steps.remote(self._actor_id, self._start["restart"], STEP_LEASE))
            if lease == 0:
                break
            if lease < 0:  # Held at an evaluation point until the evaluators have played.
                time.sleep(HELD_POLL_S)
                continue
            self._act(lease)
            steps += lease
        if getattr(self._loop.actor, "adder", None) is not None:
            self._loop.actor.adder.reset()
        return steps

    def _act(self, lease: int) -> None:
        """Exactly `lease` environment steps, all copies together. A replay write that
        times out (the replay node died, its unconfirmed items gone) gets a new connection
        to the restarted node and the rest of the lease; the episodes in flight start over."""
        start = self._loop.steps_taken
        for attempt in range(REPLAY_RECONNECTS + 1):
            try:
                self._loop.run_steps(lease - (self._loop.steps_taken - start))
                return
            except ReplayTimeoutError:
                if attempt == REPLAY_RECONNECTS:
                    raise
                experiment, stale = self._program.experiment, self._loop.actor.adder
                client = watched_replay_client(self._replay)
                self._loop.actor.adder = experiment.builder.make_adder(client, experiment.environment_spec)
                self._loop.drop_episodes()
                try:
                    stale.close()
                except Exception:  # noqa: BLE001 - the old connection is gone; nothing to keep.
                    pass

    def start_info(self) -> dict[str, int]:
        """This incarnation's `restart` count, the `steps` its schedules resumed at and
        the steps `reclaimed` from its predecessor's lease."""
        return dict(self._start)


@ray.remote(num_cpus=0)
class EvaluatorNode(_Node):
    """Plays an evaluation round whenever the driver asks."""

    def __init__(self, program: DistributedProgram, instance: int, learner: str, counter: str, timeout_s: float):
        self._loop = program.make_evaluator(
            instance,
            RemoteVariableSource(ray.get_actor(learner), asynchronous=False, timeout_s=timeout_s),
            RemoteCounter(ray.get_actor(counter), 0.0),
        )
        self._evaluations = Evaluations()

    def evaluate(self, eval_episodes: int) -> tuple[int, float, float]:
        """A round: its (actor steps, mean return, epoch time it ended)."""
        self._evaluations.evaluate(self._loop, eval_episodes)
        return (*self._evaluations.returns[-1], self._evaluations.times[-1])
