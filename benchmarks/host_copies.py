"""`host_copies`: what a MuJoCo copy's step costs a sebulba actor thread, against a raw gymnasium step of the same
task in the same invocation: copies stepped in turn by the thread itself, or by worker processes (`ProcessCopies`,
what `launcher.evaluation_processes` gives evaluation rounds), with one and with several actor threads at once.
A copy's step is a thread's step of all its copies over their number (what one copy adds to the thread's time);
ratio: to the raw step (the issue's bound: at most 2)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

import numpy as np

from rl.environments.host import HostVector
from rl.sebulba.nodes import SWITCH_INTERVAL_S
from benchmarks.common import Row, Settings, in_turns, progress, ratio, scratch

COPIES = 5  # A thread's copies: one of each of sac_mujoco's 5 seeds.
THREADS = (1, 2, 4)
STEPS = 2_000  # Steps of each thread per measurement (--quick: a tenth).


def raw_step_ms(task: str, steps: int) -> float:
    """Milliseconds of one `gymnasium.make(task)` step, random actions, resets included."""
    import gymnasium

    environment = gymnasium.make(task)
    environment.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, *environment.action_space.shape)).astype(np.float32)
    started = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = environment.step(action)
        if terminated or truncated:
            environment.reset()
    elapsed = time.perf_counter() - started
    environment.close()
    return 1e3 * elapsed / steps


def copy_step_ms(make: Callable[[list[int]], HostVector], threads: int, steps: int, action_size: int) -> float:
    """Milliseconds a copy adds to its thread's step: `threads` threads, each stepping its own COPIES copies
    (made by `make(seeds)`) `steps` times at once; the threads' mean step time over COPIES."""
    vectors = [make(list(range(thread * COPIES, (thread + 1) * COPIES))) for thread in range(threads)]
    try:
        for vector in vectors:
            vector.reset()
        shape = (steps, COPIES, action_size)
        actions = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
        seconds = [0.0] * threads
        start = threading.Barrier(threads)

        def act(index: int) -> None:
            start.wait()
            began = time.perf_counter()
            for action in actions:
                vectors[index].step(action)
            seconds[index] = time.perf_counter() - began

        workers = [threading.Thread(target=act, args=(index,)) for index in range(threads)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)  # As a run's actor threads have it.
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        sys.setswitchinterval(interval)
        return 1e3 * float(np.mean(seconds)) / steps / COPIES
    finally:
        for vector in vectors:
            vector.close()


def suite_host_copies(settings: Settings) -> list[Row]:
    """A MuJoCo copy's step in a sebulba actor thread (COPIES copies a thread; 1, 2 and 4 threads at once),
    stepped by the thread or by worker processes, against a raw gymnasium step of the task; taken in turns."""
    from rl.environments.host import DmEnvCopies
    from rl.environments.host_processes import ProcessCopies

    task = next(iter(settings.experiments or ()), "HalfCheetah-v5")
    steps = STEPS // 10 if settings.quick else STEPS
    with scratch("host-copies-") as run_dir:
        experiment = settings.compose(["experiment=sac_mujoco", f"environment.name={task}"], run_dir)
    factory = experiment.environment_factory
    action_size = int(np.prod(experiment.environment_spec.actions.shape))
    routes: dict[str, Callable[[list[int]], HostVector]] = {
        "in the thread": lambda seeds: DmEnvCopies.make(factory, seeds),
        "in worker processes": lambda seeds: ProcessCopies(factory, seeds, COPIES),
    }
    cases: list[tuple[str, Callable[[], float]]] = [("raw gymnasium step", lambda: raw_step_ms(task, steps))]
    for threads in THREADS:
        for route, make in routes.items():
            case = f"{task} copy's step, {route}, {threads} actor thread(s) x {COPIES} copies"
            cases.append((case, lambda make=make, threads=threads: copy_step_ms(make, threads, steps, action_size)))
    progress(f"host_copies: {len(cases)} cases, {settings.repeats} rounds in turns")
    values = in_turns(settings.repeats, *(measure for _, measure in cases))
    raw = values[0]
    rows = [Row("host_copies", cases[0][0], raw, "ms")]
    for (case, _), value in zip(cases[1:], values[1:]):
        bound = None if raw is None else 2 * raw
        rows.append(Row("host_copies", case, value, "ms", bound=bound, ratio=ratio(value, raw)))
    return rows
