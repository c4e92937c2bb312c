"""The Ray actors hosting the nodes (built from the `NodeBuilder`) and the proxies they
talk through. Nodes find each other by name, which stays in a node's creation task for restarts."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import threading
import time
from typing import Any, Sequence

import jax
import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rl import checkpointing, core
from rl.experiments.builders import Evaluations, NodeBuilder, StepLockReleasingIterator
from rl.loggers.base import Logger, LoggerFactory, LoggingData, to_python_scalar
from rl.replay.adders import ReplayTimeoutError

STEP_LEASE = 100  # Steps an actor leases at once (bounds counter traffic).
HELD_POLL_S = 0.02  # How often an actor held at an evaluation point asks whether it may go on.
REPLAY_RECONNECTS = 2  # New replay connections per lease before a write that keeps timing out fails.
REPLAY_ADDRESS_TIMEOUT_S = 300.0  # The replay node imports reverb and starts its server first.
REPLAY_PROBE_TIMEOUT_S = 1.0  # A probe of the replay node's incarnation between two write slices.
RETRY_S = 1.0  # How often a node asks again for the parameters of a learner Ray is restarting.


class RemoteCounter:
    """A `Counter` parent in the counter node, sent increments at most every `flush_interval_s`;
    an `actor`'s (id, incarnation) go to its lease."""

    def __init__(self, handle: Any, flush_interval_s: float = 0.5, actor: tuple[int, int] | tuple[()] = ()):
        self._handle = handle
        self._flush_interval_s = flush_interval_s
        self._actor = actor
        self._pending: collections.Counter = collections.Counter()
        self._counts: dict[str, float] = {}
        self._last_flush = 0.0
        self._lock = threading.Lock()

    def increment(self, **counts: float) -> dict[str, float]:
        with self._lock:
            self._pending.update(counts)
            if time.monotonic() - self._last_flush < self._flush_interval_s:
                return {key: self._counts.get(key, 0) + self._pending[key] for key in {**self._counts, **self._pending}}
        return self.flush()

    def flush(self) -> dict[str, float]:
        with self._lock:
            pending = self._pending
            self._pending = collections.Counter()
        self._counts = ray.get(self._handle.increment.remote(dict(pending), *self._actor))
        self._last_flush = time.monotonic()
        return dict(self._counts)

    get_counts = flush


class RemoteVariableSource(core.VariableSource):
    """The learner's parameters from another process: asynchronous (actors: only the first call
    blocks) or current (evaluators); a blocking call waits out a learner restart for `timeout_s`."""

    def __init__(self, learner: Any, asynchronous: bool = True, timeout_s: float = 300.0):
        self._learner = learner
        self._asynchronous = asynchronous
        self._timeout_s = timeout_s
        self._latest: list[Any] | None = None
        self._pending: Any = None
        self._retry_at = 0.0

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        names = list(names)
        deadline = time.monotonic() + self._timeout_s
        while self._latest is None or not self._asynchronous:  # A blocking call.
            with contextlib.suppress(GetTimeoutError, RayActorError, RayTaskError):  # Restarting: ask again.
                self._latest = ray.get(
                    self._learner.get_variables.remote(names), timeout=max(0.1, deadline - time.monotonic())
                )
                return self._latest
            if time.monotonic() >= deadline:
                raise TimeoutError(f"learner.get_variables did not answer within {self._timeout_s:g} s")
            time.sleep(RETRY_S)
        if self._pending is not None and ray.wait([self._pending], timeout=0)[0]:
            try:
                self._latest = ray.get(self._pending)
            except (RayActorError, RayTaskError):
                self._retry_at = time.monotonic() + RETRY_S  # Keep acting on what we have.
            self._pending = None
        if self._pending is None and time.monotonic() >= self._retry_at:
            self._pending = self._learner.get_variables.remote(names)
        return self._latest


@dataclasses.dataclass(eq=False)
class QueueLogger(Logger):
    """Sends records to the driver, stamped with `wall_time_s` when made."""

    queue: Any
    key: tuple
    start_time: float | None

    def write(self, data: LoggingData) -> None:
        row = {key: to_python_scalar(value) for key, value in data.items()}
        if self.start_time is not None:
            row.setdefault("wall_time_s", round(time.time() - self.start_time, 3))
        ray.get(self.queue.put_nowait.remote((self.key, row)))  # Raises when the queue is full.


@dataclasses.dataclass(eq=False)
class QueueLoggerFactory(LoggerFactory):
    """Loggers sending to the driver's `ray.util.queue.Queue` named `queue_name`."""

    queue_name: str
    start_time: float | None = None

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        return QueueLogger(ray.get_actor(self.queue_name), (label, steps_key, instance), self.start_time)


def watched_replay_client(replay: str) -> Any:
    """A client that knows the replay incarnation (pid) it joined, to learn at once of a restart."""
    from rl.replay.client import WatchedClient

    handle = ray.get_actor(replay)
    start = ray.get(handle.start_info.remote(), timeout=REPLAY_ADDRESS_TIMEOUT_S)

    def replaced() -> bool:
        try:
            return ray.get(handle.pid.remote(), timeout=REPLAY_PROBE_TIMEOUT_S) != start["pid"]
        except GetTimeoutError:
            return False  # Not known yet: the next slice asks again.
        except RayActorError:
            return True  # Gone for good: the driver ends the run.

    return WatchedClient(start["address"], replaced)


class _Node:
    def pid(self) -> int:
        return os.getpid()

    def start_info(self) -> dict[str, Any]:
        """What this incarnation (a replay or an actor node) started from, for the driver's events."""
        return dict(self._start)


@ray.remote(num_cpus=0, max_concurrency=4)
class ReplayNode(_Node):
    """The reverb server, checkpointing to `directory` (None: not at all) from `fallback`; rebuilt by
    Ray on the same port with the tables of the newest checkpoint that holds them, or empty."""

    def __init__(self, program: NodeBuilder, directory: str | None, fallback: str | None, counter: str):
        import portpicker

        proposed = portpicker.pick_unused_port()
        port = ray.get(ray.get_actor(counter).replay_port.remote(proposed), timeout=REPLAY_ADDRESS_TIMEOUT_S)
        if directory is not None and ray.get_runtime_context().was_current_actor_reconstructed:
            saved = map(checkpointing.replay_of, checkpointing.list_checkpoints(program.experiment.run_directory))
            fallback = next(filter(os.path.isdir, saved), fallback)  # Newest first.
        self._server, self._client = program.make_replay_server(directory, fallback, port)
        self._start = {
            "pid": os.getpid(),
            "address": f"{ray.util.get_node_ip_address()}:{self._server.port}",
            "restored": fallback,
            "items": int(sum(info.current_size for info in self._client.server_info(timeout=60).values())),
        }

    def run(self) -> None:
        """Returns never: the driver learns of the node's death by this call."""
        threading.Event().wait()

    def checkpoint(self) -> str:
        return self._client.checkpoint()


class StepBudget(_Node):
    """The root counter and the actor-step budget, leased to actors: a dead incarnation's leased but
    uncounted steps go back to the budget and its late calls are refused. One call at a time."""

    def __init__(
        self,
        max_actor_steps: int,
        counts: dict | None = None,
        schedule_steps: dict | None = None,
        episodes: dict | None = None,
    ):
        self._counts = collections.Counter(counts or {})
        self._episodes = {int(actor): int(count) for actor, count in (episodes or {}).items()}  # Per actor.
        self._done = int(self._counts["actor_steps"])
        self._total = self._unleased = self._limit = max(0, max_actor_steps - self._done)
        self._incarnations: dict[int, int] = {}
        self._outstanding: dict[int, int] = {}
        self._counted = {int(actor): int(steps) for actor, steps in (schedule_steps or {}).items()}  # Restored.
        self._closed = False
        self._replay_port = 0

    def increment(self, counts: dict[str, float], actor_id: int | None = None, incarnation: int = 0) -> dict:
        if actor_id is None or self.count(actor_id, incarnation, int(counts.get("actor_steps", 0))):
            self._counts.update(counts)
            if actor_id is not None:
                self._episodes[actor_id] = self._episodes.get(actor_id, 0) + int(counts.get("actor_episodes", 0))
        return dict(self._counts)

    def get_counts(self) -> dict[str, float]:
        return dict(self._counts)

    def register(self, actor_id: int) -> dict[str, int]:
        """Starts an incarnation of `actor_id`: its `restart`, the `steps` counted, the steps `reclaimed`."""
        restart = self._incarnations.get(actor_id, -1) + 1
        self._incarnations[actor_id] = restart
        reclaimed = self._outstanding.get(actor_id, 0)
        self._unleased += reclaimed
        self._outstanding[actor_id] = 0
        return {"restart": restart, "steps": self._counted.get(actor_id, 0), "reclaimed": reclaimed}

    def hold_until(self, actor_steps: int) -> None:
        """Leases stop at `actor_steps` (the next evaluation point)."""
        self._limit = max(0, int(actor_steps) - self._done)

    def lease(self, actor_id: int, incarnation: int, wanted: int) -> int:
        """Grants up to `wanted` steps: 0 when spent, closed or stale, -1 while held (ask again)."""
        if self._closed or self._incarnations.get(actor_id) != incarnation:
            return 0
        available = min(self._unleased, self._limit - (self._total - self._unleased))
        if available <= 0 < self._unleased:
            return -1
        granted = max(0, min(int(wanted), available))
        self._unleased -= granted
        self._outstanding[actor_id] += granted
        return granted

    def count(self, actor_id: int, incarnation: int, steps: int) -> bool:
        """Records `steps` taken under the current lease; False for a stale incarnation."""
        if self._incarnations.get(actor_id) != incarnation:
            return False
        if steps > self._outstanding[actor_id]:
            raise ValueError(
                f"actor {actor_id} counted {steps} steps but holds a lease of {self._outstanding[actor_id]}"
            )
        self._outstanding[actor_id] -= steps
        self._counted[actor_id] = self._counted.get(actor_id, 0) + steps
        return True

    def close(self) -> None:
        self._closed = True

    def state(self) -> dict[str, Any]:
        outstanding = dict(self._outstanding)
        counted = dict(self._counted)
        restarts = dict(self._incarnations)
        return {"unleased": self._unleased, "outstanding": outstanding, "counted": counted, "restarts": restarts}

    def snapshot(self) -> dict[str, Any]:
        return {"counts": dict(self._counts), "schedule_steps": dict(self._counted), "episodes": dict(self._episodes)}

    def replay_port(self, proposed: int) -> int:
        self._replay_port = self._replay_port or int(proposed)
        return self._replay_port

    def set_learner_steps(self, steps: int) -> int:
        """Sets `learner_steps` back to a restored learner's; returns the count it replaces."""
        previous = int(self._counts["learner_steps"])
        self._counts["learner_steps"] = int(steps)
        return previous


CounterNode = ray.remote(num_cpus=0)(StepBudget)


# A learner told to stop that has waited this long for a batch is taken to wait for one that cannot come.
BLOCKED_S = 0.25


def stepping_stopped(ended: threading.Event, batches: StepLockReleasingIterator | None, timeout: float) -> bool:
    """Waits until a learner told to stop has `ended` its loop or has waited `BLOCKED_S` on `batches`;
    False after `timeout` s without either."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not ended.wait(0.01):
        since = batches.waiting_since if batches is not None else None
        if since is not None and time.monotonic() - since > BLOCKED_S:
            return True
    return ended.is_set()


@ray.remote(max_concurrency=4)
class LearnerNode(_Node):
    """Steps the learner and serves numpy parameters; rebuilt by Ray, it waits to be `restore`d."""

    def __init__(self, program: NodeBuilder, replay: str, counter: str):
        self._counter_handle = ray.get_actor(counter)
        self._counter = RemoteCounter(self._counter_handle)
        self._step_lock = threading.Lock()
        self._batches: StepLockReleasingIterator | None = None
        self._learner = program.make_learner(watched_replay_client(replay), self._counter, wrap_dataset=self._pausable)
        self._stop = threading.Event()
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._params: dict[str, tuple[int, Any]] = {}  # Per name: (learner version, numpy value).
        self._version = 0
        self._ready = threading.Event()
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            self._ready.set()

    def _pausable(self, dataset: Any) -> StepLockReleasingIterator:
        self._batches = StepLockReleasingIterator(dataset, self._step_lock)
        return self._batches

    def run(self) -> None:
        self._ready.wait()
        while not self._stop.is_set():
            with self._step_lock:
                self._learner.step()
                self._version += 1
        self._counter.flush()
        self._ended.set()

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        if not self._ready.wait(timeout=10.0):
            raise RuntimeError("the learner is being restored")
        with self._lock:
            for name in names:
                if self._params.get(name, (None,))[0] != self._version:
                    self._params[name] = (self._version, jax.device_get(self._learner.get_variables([name])[0]))
            return [self._params[name][1] for name in names]

    def save(self) -> Any:
        return jax.tree_util.tree_map(np.asarray, self._learner.save())

    def checkpoint(self) -> dict[str, Any]:
        with self._step_lock:
            self._learner.check_finite()
            self._counter.flush()
            snapshot = ray.get(self._counter_handle.snapshot.remote(), timeout=60)
            return snapshot | {"state": self.save()}

    def restore(self, state: Any) -> str:
        """Continues from `state` (None: the initial one); returns its sha256."""
        with self._step_lock:
            if state is not None:
                self._learner.restore(state)
                self._version += 1
            leaves = jax.tree_util.tree_leaves(jax.device_get(self._learner.save()))
        self._ready.set()
        return checkpointing.state_digest(leaves)

    def stop(self, timeout: float) -> bool:
        """Stops stepping. Returns once the learner has ended, or has waited `BLOCKED_S` for a batch: with the
        actors stopped, that batch (held back by the rate limiter) never comes, so no step follows; False
        after `timeout` s without either."""
        self._stop.set()
        return stepping_stopped(self._ended, self._batches, timeout)


@ray.remote
class ActorNode(_Node):
    """Acts until the step budget is spent; rebuilt by Ray, it registers again (a fresh key, counted
    from `key_offset`)."""

    def __init__(self, program: NodeBuilder, actor_id: int, replay: str, learner: str, counter: str, key_offset: int):
        self._program = program
        self._replay = replay
        self._actor_id = actor_id
        self._counter = ray.get_actor(counter)
        self._start = ray.get(self._counter.register.remote(actor_id))
        self._loop = program.make_actor(
            actor_id,
            watched_replay_client(replay),
            RemoteVariableSource(ray.get_actor(learner)),
            RemoteCounter(self._counter, 0.0, (actor_id, self._start["restart"])),
            restart=key_offset + self._start["restart"],
            initial_step=self._start["steps"],
        )

    def run(self) -> None:
        while True:
            self._loop.count_partial_episode()  # The spent lease's steps counted before the next.
            lease = ray.get(self._counter.lease.remote(self._actor_id, self._start["restart"], STEP_LEASE))
            if lease == 0:
                break
            if lease < 0:  # Held at an evaluation point until the evaluators have played.
                time.sleep(HELD_POLL_S)
                continue
            self._act(lease)
        self._loop.actor.adder.reset()

    def _act(self, lease: int) -> None:
        start = self._loop.steps_taken
        for attempt in range(REPLAY_RECONNECTS + 1):
            try:
                self._loop.run_steps(lease - (self._loop.steps_taken - start))
                return
            except ReplayTimeoutError:
                if attempt == REPLAY_RECONNECTS:
                    raise
                experiment = self._program.experiment
                stale = self._loop.actor.adder
                client = watched_replay_client(self._replay)
                self._loop.actor.adder = experiment.builder.make_adder(client, experiment.environment_spec)
                self._loop.drop_episodes()
                with contextlib.suppress(Exception):  # The old connection is gone; nothing to keep.
                    stale.close()


@ray.remote(num_cpus=0)
class EvaluatorNode(_Node):
    def __init__(self, program: NodeBuilder, instance: int, learner: str, counter: str, timeout_s: float):
        self._loop = program.make_evaluator(
            instance,
            RemoteVariableSource(ray.get_actor(learner), asynchronous=False, timeout_s=timeout_s),
            RemoteCounter(ray.get_actor(counter), 0.0),
        )
        self._evaluations = Evaluations()

    def evaluate(self, eval_episodes: int) -> tuple[int, float, float]:
        self._evaluations.evaluate(self._loop, eval_episodes)
        return (*self._evaluations.returns[-1], self._evaluations.times[-1])
