"""The Ray actors that host an experiment's nodes, and the proxies nodes talk through.

Each node builds its part of the experiment from the shared `DistributedProgram`, so the
agents know nothing about Ray: a remote learner looks like a `VariableSource`, the remote
counter like a `Counter` parent and the driver's loggers like a logger factory.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any, Sequence

import jax
import numpy as np
import ray

from rl import core
from rl import checkpointing
from rl.checkpointing import state_digest
from rl.counting import Counter, StepBudget
from rl.experiments.builders import DistributedProgram, Evaluations
from rl.experiments.learner_thread import StepLockReleasingIterator
from rl.loggers.base import Logger, LoggerFactory, LoggingData, to_python_scalar
from rl.replay.adders import ReplayTimeoutError

# Steps an actor leases from the counter at once: bounds counter traffic, and the total
# never exceeds max_actor_steps because the counter grants only what is left. An actor
# counts its steps at every lease boundary, so one that dies loses at most this many
# uncounted steps, and the counter returns them to the budget when it restarts.
STEP_LEASE = 100
# How often an actor held at an evaluation point asks whether it may go on.
HELD_POLL_S = 0.02


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

    def take_pending(self) -> dict[str, float]:
        """The increments not sent yet, now the caller's to send (then `received`)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def received(self, counts: dict[str, float]) -> None:
        """The root's counts after the caller sent what `take_pending` gave it."""
        self._counts = dict(counts)
        self._last_flush = time.monotonic()

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

    A learner that dies and is restarted by Ray is waited for: an asynchronous source
    keeps acting on the parameters it has and asks again every `retry_interval_s`; a
    blocking call retries until `timeout_s` has passed, then raises a `TimeoutError`
    naming the learner and the call.
    """

    def __init__(
        self,
        learner_handle: Any,
        asynchronous: bool = True,
        timeout_s: float = 300.0,
        retry_interval_s: float = 1.0,
    ):
        self._learner = learner_handle
        self._asynchronous = asynchronous
        self._timeout_s = timeout_s
        self._retry_interval_s = retry_interval_s
        self._latest: list[Any] | None = None
        self._pending: Any = None
        self._retry_at = 0.0

    def _fetch(self, names: list[str]) -> list[Any]:
        """The learner's parameters now, waiting out a restart (at most `timeout_s`)."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return ray.get(self._learner.get_variables.remote(names), timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                pass
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                pass  # Dead, restarting, or restarted and not yet restored: ask again.
            if time.monotonic() >= deadline:
                raise TimeoutError(f"learner.get_variables did not answer within {self._timeout_s:g} s")
            time.sleep(self._retry_interval_s)

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        names = list(names)
        if self._latest is None or not self._asynchronous:
            self._latest = self._fetch(names)
            return self._latest
        if self._pending is not None:
            ready, _ = ray.wait([self._pending], timeout=0)
            if ready:
                try:
                    self._latest = ray.get(self._pending)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                    self._retry_at = time.monotonic() + self._retry_interval_s  # Keep acting on what we have.
                self._pending = None
        if self._pending is None and time.monotonic() >= self._retry_at:
            self._pending = self._learner.get_variables.remote(names)
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
        ray.get(self._queue.put_nowait.remote((self._key, row)))  # Raises when the queue is full.


class QueueLoggerFactory(LoggerFactory):
    """Loggers that send to the driver's queue (a `ray.util.queue.Queue` named
    `queue_name`), found by name in the node that makes them: the factory travels inside
    the program, where a handle would make Ray keep node arguments in the object store."""

    def __init__(self, queue_name: str, start_time: float | None = None):
        self._queue_name = queue_name
        self.start_time = start_time

    def __call__(self, label: str, steps_key: str | None = None, instance: int | None = None) -> Logger:
        return QueueLogger(node_handle(self._queue_name), label, steps_key, instance, self.start_time)


# New replay connections an actor makes in one lease before a write that keeps timing
# out fails the actor (a replay node that comes back takes one).
REPLAY_RECONNECTS = 2

# How long a node waits for the replay node to serve its address (it imports reverb and
# starts a server first).
REPLAY_ADDRESS_TIMEOUT_S = 300.0

# How long an actor's probe of the replay node's incarnation waits between two slices of
# a replay write (rl.replay.adders.WRITE_SLICE_MS).
REPLAY_PROBE_TIMEOUT_S = 1.0


def node_names() -> dict[str, str]:
    """Names of this run's replay, counter and learner nodes, unique to the run."""
    token = uuid.uuid4().hex[:12]
    return {
        "replay": f"rl-replay-{token}",
        "counter": f"rl-counter-{token}",
        "learner": f"rl-learner-{token}",
        "log_queue": f"rl-log-queue-{token}",
    }


def node_handle(name_or_handle: Any) -> Any:
    """The handle of a node named `name_or_handle` (or that handle itself). A name is a
    plain string Ray keeps in the constructor's task, so a restarted node finds it too."""
    return ray.get_actor(name_or_handle) if isinstance(name_or_handle, str) else name_or_handle


def replay_client(replay_node: Any) -> Any:
    """A reverb client of the replay node named `replay_node`. Nodes ask for the address
    themselves, so every node starts (imports, compiles) while the server comes up."""
    import reverb

    address = ray.get(node_handle(replay_node).address.remote(), timeout=REPLAY_ADDRESS_TIMEOUT_S)
    return reverb.Client(address)


def watched_replay_client(replay_node: Any) -> Any:
    """A reverb client of the replay node that knows the incarnation (pid) it connected
    to: a writer waiting on it learns within seconds that Ray restarted the node, rather
    than waiting out its bound for items the dead server never confirmed."""
    from rl.replay.server import WatchedClient

    handle = node_handle(replay_node)
    start = ray.get(handle.start_info.remote(), timeout=REPLAY_ADDRESS_TIMEOUT_S)

    def replaced() -> bool:
        try:
            return ray.get(handle.pid.remote(), timeout=REPLAY_PROBE_TIMEOUT_S) != start["pid"]
        except ray.exceptions.GetTimeoutError:
            return False  # Restarting, or a busy machine: not known yet; the next slice asks again.
        except ray.exceptions.RayActorError:
            return True  # Gone for good: the driver ends the run.

    return WatchedClient(start["address"], replaced)


def free_port() -> int:
    """A TCP port free on this machine now (the port a replay node proposes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


@ray.remote(num_cpus=0, max_concurrency=4)
class ReplayNode:
    """The reverb server, on `port`. With `checkpoint_directory` it checkpoints its tables
    there (reverb's checkpointer) and starts from `fallback_checkpoint` when given.

    Its port comes from the counter node (`counter`), which keeps the first one chosen:
    rebuilt by Ray after a fault, it listens on the same port again (so the actors'
    writers and the learner's dataset reconnect by themselves, gRPC retrying the address)
    with the tables of the run's newest checkpoint that holds them, or empty without
    replay checkpoints. `serve` is the driver's watch: it never returns, and fails when
    the process dies.
    """

    def __init__(
        self,
        program: DistributedProgram,
        checkpoint_directory: str | None = None,
        fallback_checkpoint: str | None = None,
        counter: Any = None,
    ):
        import reverb

        port = None
        if counter is not None:
            port = ray.get(node_handle(counter).replay_port.remote(free_port()), timeout=REPLAY_ADDRESS_TIMEOUT_S)

        checkpointer = None
        if checkpoint_directory is not None:
            if ray.get_runtime_context().was_current_actor_reconstructed:
                fallback_checkpoint = _newest_replay_checkpoint(program.experiment.run_directory) or fallback_checkpoint
            checkpointer = reverb.checkpointers.DefaultCheckpointer(
                checkpoint_directory, fallback_checkpoint_path=fallback_checkpoint
            )
        from rl.replay.server import make_server

        self._server = make_server(program.make_replay_tables(), port=port, checkpointer=checkpointer)
        self._address = f"{ray.util.get_node_ip_address()}:{self._server.port}"
        tables = reverb.Client(f"localhost:{self._server.port}").server_info(timeout=60)
        self._start = {
            "pid": os.getpid(),
            "address": self._address,
            "restored": fallback_checkpoint if checkpoint_directory is not None else None,
            "items": int(sum(info.current_size for info in tables.values())),
        }

    def address(self) -> str:
        return self._address

    def start_info(self) -> dict[str, Any]:
        """This incarnation's `pid`, `address`, the replay checkpoint it `restored`
        (None: none) and the `items` its tables held when it started."""
        return dict(self._start)

    def serve(self) -> None:
        """Never returns: a call the driver keeps in flight to learn of a death."""
        threading.Event().wait()

    def checkpoint(self) -> str:
        """Checkpoints the tables; returns the directory reverb wrote."""
        import reverb

        return reverb.Client(f"localhost:{self._server.port}").checkpoint()

    def pid(self) -> int:
        return os.getpid()


def _newest_replay_checkpoint(run_directory: str) -> str | None:
    """The replay tables of the run's newest checkpoint that holds them (each checkpoint
    keeps reverb's at `<run dir>/checkpoints/step_<n>/files/replay`)."""
    for path in checkpointing.list_checkpoints(run_directory):
        replay = checkpointing.replay_of(path)
        if os.path.isdir(replay):
            return replay
    return None


@ray.remote(num_cpus=0)
class CounterNode:
    """The root counter, and the keeper of the actor-step budget (`StepBudget`).

    A resumed run starts from its checkpoint's `counts`; the budget is what is left of
    `max_actor_steps`, and `schedule_steps` (per actor, from the checkpoint) are added to
    what each actor counts in this session, where its schedules resume. Actor keys of
    session `s` are numbered from `s * key_stride`, so no session replays another's.
    """

    def __init__(
        self,
        max_actor_steps: int,
        counts: dict[str, float] | None = None,
        schedule_steps: dict[int, int] | None = None,
        session: int = 0,
        key_stride: int = 1,
    ):
        self._counter = Counter()
        if counts:
            self._counter.restore(counts)
        done = int((counts or {}).get("actor_steps", 0))
        self._done = done
        self._budget = StepBudget(max(0, max_actor_steps - done))
        self._schedule_steps = {int(k): int(v) for k, v in (schedule_steps or {}).items()}
        self._key_offset = session * key_stride
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
        """Up to `wanted` steps; 0: the budget is spent (or the run stops); -1: acting waits
        for the evaluation at the current point (`hold_until`)."""
        if self._closed:
            return 0
        return self._budget.lease(actor_id, incarnation, wanted)

    def hold_until(self, actor_steps: int) -> None:
        """Lets actors step only until the run's count reaches `actor_steps` (the next
        evaluation point), so evaluations sit at the same steps as a local run's."""
        self._budget.hold_at(int(actor_steps) - self._done)

    def increment_actor(self, actor_id: int, incarnation: int, counts: dict[str, float]) -> dict[str, float]:
        """An actor's counts; a replaced incarnation's are dropped (its lease was reclaimed)."""
        if self._budget.count(actor_id, incarnation, int(counts.get("actor_steps", 0))):
            return self._counter.increment(**counts)
        return self._counter.get_counts()

    def close(self) -> None:
        """Grants no more leases: each actor ends after the lease it holds (a clean stop)."""
        self._closed = True

    def snapshot(self, pending: dict[str, float]) -> dict[str, Any]:
        """Adds `pending` (the learner's unsent counts), then returns the counts and each
        actor's schedule step, at one moment."""
        counts = self._counter.increment(**pending) if pending else self._counter.get_counts()
        counted = self._budget.state()["counted"]
        steps = dict(self._schedule_steps)
        for actor_id, count in counted.items():
            steps[actor_id] = steps.get(actor_id, 0) + count
        return {"counts": counts, "schedule_steps": steps}

    def replay_port(self, proposed: int) -> int:
        """The replay node's port: the first one proposed, for every incarnation."""
        if self._replay_port is None:
            self._replay_port = int(proposed)
        return self._replay_port

    def set_learner_steps(self, steps: int) -> int:
        """Sets `learner_steps` back to a restored learner's; returns the count it replaces."""
        counts = self._counter.get_counts()
        previous = int(counts.get("learner_steps", 0))
        counts["learner_steps"] = int(steps)
        self._counter.restore(counts)
        return previous

    def budget(self) -> dict[str, Any]:
        """`StepBudget.state`, with the steps of earlier sessions in `counted`."""
        state = self._budget.state()
        counted = dict(self._schedule_steps)
        for actor_id, count in state["counted"].items():
            counted[actor_id] = counted.get(actor_id, 0) + count
        state["counted"] = counted
        return state

    def pid(self) -> int:
        return os.getpid()


@ray.remote(max_concurrency=4)
class LearnerNode:
    """Steps the learner on its own thread and serves parameters as numpy arrays.

    Each step holds a lock, released while the step waits for replay, so `checkpoint`
    reads the state and the counts between two steps. Rebuilt by Ray after a fault, the
    node serves nothing (callers wait) until the driver has `restore`d the last
    checkpoint's state into it.
    """

    def __init__(self, program: DistributedProgram, replay_node: Any, counter_handle: Any):
        counter_handle = node_handle(counter_handle)
        self._counter_handle = counter_handle
        self._counter = RemoteCounter(counter_handle)
        self._step_lock = threading.Lock()
        self._learner = program.make_learner(
            replay_client(replay_node),
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
        """Runs until `stop`; returns the number of learner steps taken.

        Once the actors stop inserting, a step can block on the rate limiter for good;
        the driver then stops waiting for this call and shuts the process down.
        """
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
        `counts` (with every learner step sent) and the actors' `schedule_steps`."""
        with self._step_lock:
            self._learner.check_finite()
            pending = self._counter.take_pending()
            snapshot = ray.get(self._counter_handle.snapshot.remote(pending), timeout=60)
            self._counter.received(snapshot["counts"])
            snapshot["state"] = jax.tree_util.tree_map(np.asarray, self._learner.save())
            return snapshot

    def restore(self, state: Any) -> str:
        """Continues from `state` (None: from the initial state), then serves again;
        returns the sha256 of the state it now holds (`checkpointing.state_digest`)."""
        with self._step_lock:
            if state is not None:
                self._learner.restore(state)
                self._version += 1
            leaves = jax.tree_util.tree_leaves(jax.device_get(self._learner.save()))
        self._ready.set()
        return state_digest(leaves)

    def stop(self) -> None:
        self._stop.set()

    def pid(self) -> int:
        return os.getpid()


@ray.remote
class ActorNode:
    """Acts until the counter's step budget is spent.

    Ray rebuilds it after a fault by running `__init__` again: registering with the
    counter returns the lease of the dead incarnation to the budget and gives the
    restart count, the key to act with (fresh for every restart and session) and the
    steps counted so far (where schedules resume).
    """

    def __init__(
        self,
        program: DistributedProgram,
        actor_id: int,
        replay_node: Any,
        learner_handle: Any,
        counter_handle: Any,
    ):
        learner_handle, counter_handle = node_handle(learner_handle), node_handle(counter_handle)
        self._program = program
        self._replay_node = replay_node
        self._actor_id = actor_id
        self._counter_handle = counter_handle
        self._start = ray.get(counter_handle.register_actor.remote(actor_id))
        self._incarnation = self._start["restart"]
        self._loop = program.make_actor(
            actor_id,
            watched_replay_client(replay_node),
            RemoteVariableSource(learner_handle),
            ActorStepCounter(counter_handle, actor_id, self._incarnation),
            restart=self._start["key"],
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
            if lease < 0:  # Held at an evaluation point until the evaluators have played.
                time.sleep(HELD_POLL_S)
                continue
            self._act(lease)
            steps += lease
        adder = getattr(self._loop.actor, "adder", None)
        if adder is not None:
            adder.reset()
        return steps

    def _act(self, lease: int) -> None:
        """Exactly `lease` environment steps, all copies together. A replay write that
        fails (the replay node died: the items it had not confirmed are gone, and a
        writer waiting for them never returns; the watched client notices the restarted
        node within a write slice) gets a new connection to the restarted node and the
        rest of the lease; the episodes in flight start over."""
        start = self._loop.steps_taken
        for attempt in range(REPLAY_RECONNECTS + 1):
            try:
                self._loop.run_steps(lease - (self._loop.steps_taken - start))
                return
            except ReplayTimeoutError:
                if attempt == REPLAY_RECONNECTS:
                    raise
                self._reconnect_replay()

    def _reconnect_replay(self) -> None:
        experiment = self._program.experiment
        stale = self._loop.actor.adder
        self._loop.actor.adder = experiment.builder.make_adder(
            watched_replay_client(self._replay_node), experiment.environment_spec
        )
        self._loop.drop_episodes()
        try:
            stale.close()
        except Exception:  # noqa: BLE001 - the old connection is gone; nothing to keep.
            pass

    def start_info(self) -> dict[str, int]:
        """This incarnation's `restart` count, the `steps` its schedules resumed at and
        the steps `reclaimed` from its predecessor's lease."""
        return dict(self._start)

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class EvaluatorNode:
    """Runs an evaluation round whenever the driver asks (every `eval_every` actor steps)."""

    def __init__(
        self,
        program: DistributedProgram,
        instance: int,
        learner_handle: Any,
        counter_handle: Any,
        variables_timeout_s: float = 300.0,
    ):
        learner_handle, counter_handle = node_handle(learner_handle), node_handle(counter_handle)
        self._loop = program.make_evaluator(
            instance,
            RemoteVariableSource(learner_handle, asynchronous=False, timeout_s=variables_timeout_s),
            RemoteCounter(counter_handle, 0.0),
        )
        self._evaluations = Evaluations()

    def evaluate(self, eval_episodes: int) -> tuple[int, float, float]:
        """A round: its (actor steps, mean return, epoch time it ended)."""
        self._evaluations.evaluate(self._loop, eval_episodes)
        return (*self._evaluations.returns[-1], self._evaluations.times[-1])

    def pid(self) -> int:
        return os.getpid()
