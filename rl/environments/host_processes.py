"""dm_env copies stepped in worker processes for launcher=sebulba: a copy's step is mostly Python (gymnasium's
wrappers, the dm_env adapter) around a short C call, so copies stepped one after another in an actor thread make
that thread the bound, and several actor threads only contend for the GIL. Here each worker process steps its
share of the copies (a `DmEnvCopies`) and the actor thread waits on pipes, the GIL free, while they all step at
once. Copy i is the same environment with the same seed as in the actor thread: the run's records are unchanged."""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

import dm_env
import numpy as np

from rl.environments.gymnax_vector import EnvStep
from rl.environments.host import DmEnvCopies, HostVector

# Seconds `close` waits for a worker to leave before it is terminated.
CLOSE_TIMEOUT_S = 5.0


def serve(connection: Connection, factory: Callable[..., dm_env.Environment], seeds: list[int]) -> None:
    """A worker's loop: ("reset" | "step" | "reseed" | "close", payload) in, ("ok" | "error", answer) out. The
    worker leaves when told to or when its parent's end of the pipe closes (the parent died); the run's signals
    are its parent's to answer."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    copies: DmEnvCopies | None = None
    while True:
        try:
            command, payload = connection.recv()
        except (EOFError, OSError):
            break
        try:
            if command == "close":
                break
            if command == "reseed" or copies is None:
                if copies is not None:
                    copies.close()
                copies = DmEnvCopies.make(factory, payload if command == "reseed" else seeds)
                if command == "reseed":
                    connection.send(("ok", None))
                    continue
            answer = copies.reset() if command == "reset" else copies.step(payload)
            connection.send(("ok", answer))
        except Exception:  # noqa: BLE001 - the parent raises it with the worker's traceback.
            connection.send(("error", traceback.format_exc()))
    if copies is not None:
        copies.close()
    connection.close()


class ProcessCopies(HostVector):
    """`len(seeds)` copies of `factory`'s environment split over `processes` worker processes (at most one per
    copy), copy i seeded with `seeds[i]`; `step` sends each worker its copies' actions, then gathers their
    answers in copy order."""

    def __init__(self, factory: Callable[..., dm_env.Environment], seeds: Sequence[int], processes: int):
        if processes < 1:
            raise ValueError(f"ProcessCopies needs at least one process, got {processes}")
        self.num_envs = len(seeds)
        shares = np.array_split(np.asarray([int(seed) for seed in seeds]), min(processes, self.num_envs))
        self.bounds = np.cumsum([len(share) for share in shares])[:-1]
        context = multiprocessing.get_context("spawn")  # JAX's threads make fork unsafe.
        self.connections: list[Connection] = []
        self.workers: list[Any] = []
        for index, share in enumerate(shares):
            ours, theirs = context.Pipe()
            worker = context.Process(
                target=serve, args=(theirs, factory, share.tolist()), name=f"environments-{index}", daemon=True
            )
            worker.start()
            theirs.close()
            self.connections.append(ours)
            self.workers.append(worker)

    def ask(self, messages: Sequence[tuple[str, Any]]) -> list[Any]:
        """Sends worker k `messages[k]`, then waits for every answer (the workers step at the same time)."""
        for connection, message in zip(self.connections, messages):
            connection.send(message)
        answers = []
        for index, connection in enumerate(self.connections):
            try:
                status, answer = connection.recv()
            except (EOFError, OSError):
                code = self.workers[index].exitcode
                raise RuntimeError(f"environment worker {index} died (exit code {code})") from None
            if status == "error":
                raise RuntimeError(f"environment worker {index} failed:\n{answer}")
            answers.append(answer)
        return answers

    def reset(self) -> np.ndarray:
        return np.concatenate(self.ask([("reset", None)] * len(self.connections)))

    def step(self, actions: np.ndarray) -> EnvStep:
        answers = self.ask([("step", share) for share in np.split(np.asarray(actions), self.bounds)])
        return EnvStep(*(np.concatenate(field) for field in zip(*answers)))

    def reseed(self, seeds: Sequence[int]) -> None:
        """New copies with `seeds` (as many as before) in the same workers: no process starts again."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"reseed needs {self.num_envs} seeds, got {len(seeds)}")
        shares = np.split(np.asarray([int(seed) for seed in seeds]), self.bounds)
        self.ask([("reseed", share.tolist()) for share in shares])

    def close(self) -> None:
        for connection in self.connections:
            try:
                connection.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for worker in self.workers:
            worker.join(CLOSE_TIMEOUT_S)
            if worker.is_alive():
                worker.terminate()
        for connection in self.connections:
            connection.close()
        self.connections, self.workers = [], []
