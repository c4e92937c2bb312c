"""An adder that runs in a child process, so acting never waits for replay bookkeeping.

An actor step runs the policy, the environment and the adder one after the other on one
Python thread (the GIL allows no more); the adder's part (n-step windows, packing, one
reverb item per transition) costs as much as the environment's or more
(`scripts/benchmark.py actor`). `AdderProcess` hands the adder's calls to a child
process that owns the real adder and its reverb writer, so the actor's thread steps the
environment while the child writes the previous steps: acting is bound by the slower of
the two instead of their sum.

What the table receives is unchanged: the child makes the same calls, in the same order,
with the same arguments, on the agent's own adder. What changes is timing: items reach
the table a few steps later (at most `MAX_MESSAGES_IN_FLIGHT` messages of
`CALLS_PER_MESSAGE` calls), `num_items` lags by as much, and a replay error is raised
by the call after the one that caused it. `reset()` waits for everything sent (the
end of a run, before its final learner steps). A run whose order must not depend on
timing (`launcher.deterministic=true`) keeps the adder in its own thread.

The child exits when the parent closes the adder, and when the parent dies (its end of
the pipe closes, and the child is handed to another parent, which it checks every
second: a child waiting on a server that died with its parent sees no pipe), so a
killed actor leaves no writer behind.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time
import weakref
from typing import Any, Callable, Sequence

import dm_env
import numpy as np

from rl.replay.adders import Adder

# Calls sent together: one pipe write (and one pickling) per message.
CALLS_PER_MESSAGE = 4
# Messages the child may hold unprocessed before the actor waits for it: the actor stays
# within a few steps of replay, so reverb's rate limiter still paces acting.
MAX_MESSAGES_IN_FLIGHT = 8
# How long the actor waits for the child (start-up included: importing reverb and
# TensorFlow takes seconds; a replay write waits at most its own bound, 120 s).
REPLY_TIMEOUT_S = 300.0
# How often the child checks that its parent lives.
PARENT_POLL_S = 1.0


class AdderProcessError(RuntimeError):
    """The adder's process exited or stopped answering."""


def _exit_with(parent: int) -> None:
    """Ends this process once `parent` is no longer its parent (it died): a child
    blocked in reverb (a server that went with the parent) never reads the closed pipe."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _serve(make_adder: Callable[[Any], Adder], server_address: str, connection: Any, parent: int) -> None:
    """The child: builds the adder on its own client, then makes the calls it receives.

    Replies, one per message, say how many items exist or carry the error a call raised;
    after an error the calls of later messages are dropped (their episodes cannot be
    completed) until a reset.
    """
    threading.Thread(target=_exit_with, args=(parent,), name="parent-watch", daemon=True).start()
    import reverb

    try:
        adder = make_adder(reverb.Client(server_address))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it.
        connection.send(("error", _picklable(error)))
        return
    failed = False
    while True:
        try:
            kind, payload = connection.recv()
        except (EOFError, OSError):  # The parent is gone.
            kind = "close"
        if kind == "close":
            # Nothing left to keep (the parent resets first to keep its calls): skip the
            # interpreter's teardown of TensorFlow and reverb, which takes seconds.
            os._exit(0)
        try:
            if kind == "calls" and not failed:
                for method, args, kwargs in payload:
                    getattr(adder, method)(*map(_unpack, args), **kwargs)
            elif kind == "reset":
                failed = False
                adder.reset(*payload)
            connection.send(("ok", adder.num_items))
        except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it.
            failed = True
            connection.send(("error", _picklable(error)))


# Arrays and timesteps of arrays travel as raw bytes: pickling a small NumPy array costs
# several microseconds of Python (its __reduce__), about what the adder's own work on a
# step of one copy costs; bytes, strings and tuples pickle in a fraction of that.
_ARRAY, _TIMESTEP = "\0array", "\0timestep"


def _pack(value: Any) -> Any:
    """A call's argument, its arrays as (marker, bytes, dtype, shape)."""
    if type(value) is np.ndarray:
        return (_ARRAY, value.tobytes(), value.dtype.str, value.shape)
    if type(value) is dm_env.TimeStep and all(type(field) is np.ndarray for field in value):
        return (_TIMESTEP, *map(_pack, value))
    return value


def _unpack(value: Any) -> Any:
    """The argument `_pack` packed (its arrays read-only views of the bytes received)."""
    if type(value) is tuple and value and type(value[0]) is str:
        if value[0] == _ARRAY:
            return np.frombuffer(value[1], value[2]).reshape(value[3])
        if value[0] == _TIMESTEP:
            return dm_env.TimeStep(*map(_unpack, value[1:]))
    return value


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.dumps(error)
        return error
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(error).__name__}: {error}")


def _shutdown(connection: Any, process: Any) -> None:
    """Asks the child to stop (closing the pipe would too) and waits for it briefly."""
    try:
        connection.send(("close", None))
    except (OSError, ValueError):
        pass
    connection.close()
    process.join(timeout=5)
    if process.is_alive():
        process.kill()
        process.join()


class AdderProcess(Adder):
    """The adder `make_adder(client)` makes, run in a child process (module docstring).

    `make_adder` must pickle (it goes to a spawned process): a `functools.partial` of a
    module-level function over the builder and the environment spec, say.
    """

    def __init__(
        self,
        make_adder: Callable[[Any], Adder],
        server_address: str,
        calls_per_message: int = CALLS_PER_MESSAGE,
        max_messages_in_flight: int = MAX_MESSAGES_IN_FLIGHT,
        reply_timeout_s: float = REPLY_TIMEOUT_S,
    ):
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(make_adder, server_address, child, os.getpid()), name="adder", daemon=True
        )
        self._process.start()
        child.close()
        self._calls: list[tuple[str, tuple, dict]] = []
        self._calls_per_message = int(calls_per_message)
        self._max_in_flight = int(max_messages_in_flight)
        self._timeout_s = float(reply_timeout_s)
        self._in_flight = 0
        self._num_items = 0
        self._error: BaseException | None = None
        self._finalizer = weakref.finalize(self, _shutdown, self._connection, self._process)

    @property
    def num_items(self) -> int:
        """Items the child had created at its latest reply."""
        return self._num_items

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def add_first(self, timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None) -> None:
        self._call("add_first", (timestep, env_ids), {})

    def add(
        self, actions: Any, next_timestep: dm_env.TimeStep, env_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> None:
        """Records a step; keyword arguments (an extras adder's `extras`) go along."""
        self._call("add", (actions, next_timestep, env_ids), kwargs)

    def reset(self, timeout_ms: int | None = None) -> None:
        """Sends what is queued, resets the child's adder and waits until it is done."""
        self._send_calls()
        self._send(("reset", () if timeout_ms is None else (timeout_ms,)))
        self.sync()

    def sync(self) -> None:
        """Sends what is queued and waits until the child has made every call sent (its
        adder's writes may still be pending in reverb, as for an adder in this process)."""
        self._send_calls()
        while self._in_flight:
            self._receive(block=True)
        self._raise_error()

    def close(self) -> None:
        """Stops the child (pending calls are dropped: `reset` first to keep them)."""
        self._finalizer()

    def _call(self, method: str, args: tuple, kwargs: dict) -> None:
        self._raise_error()
        self._calls.append((method, tuple(map(_pack, args)), kwargs))
        if len(self._calls) >= self._calls_per_message:
            self._send_calls()

    def _send_calls(self) -> None:
        if self._calls:
            calls, self._calls = self._calls, []
            self._send(("calls", calls))

    def _send(self, message: tuple) -> None:
        while self._connection.poll():  # Replies that are in: no waiting.
            self._receive(block=False)
        while self._in_flight >= self._max_in_flight:
            self._receive(block=True)
        self._raise_error()
        self._connection.send(message)
        self._in_flight += 1

    def _receive(self, block: bool) -> None:
        if block and not self._connection.poll(self._timeout_s):
            alive = self._process.is_alive()
            raise AdderProcessError(
                f"the adder process (pid {self._process.pid}) "
                + (
                    f"did not answer within {self._timeout_s:g} s"
                    if alive
                    else f"exited with code {self._process.exitcode}"
                )
            )
        try:
            kind, value = self._connection.recv()
        except EOFError:
            raise AdderProcessError(
                f"the adder process (pid {self._process.pid}) exited with code {self._process.exitcode}"
            ) from None
        self._in_flight -= 1
        if kind == "ok":
            self._num_items = value
        else:
            self._error = self._error or value

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error
