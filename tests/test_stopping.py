"""Stopping a run within seconds: a wait on a device gives up on the first SIGINT or SIGTERM
(rl.experiments.signals.wait_for) and a second one ends it; a signal swallowed while the run starts is
still a stop; a grid and an anakin run stopped in the middle of a long chunk exit at once, with their
summaries (status `interrupted`) and, for the run, a checkpoint of the last consistent state."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import read_summary, start_train
from rl.experiments import signals

# How long a stop may take once the signal is sent (the checkpoint and records included): generous, for a
# loaded two-core machine; the runs' chunks below last minutes.
STOP_WITHIN_S = 30


def _signal_later(delay_s: float, signum: int = signal.SIGTERM) -> threading.Timer:
    timer = threading.Timer(delay_s, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


def test_a_wait_returns_the_works_result_or_raises_its_error():
    assert signals.wait_for(lambda: 41 + 1, lambda: False, "sums") == 42
    with pytest.raises(ZeroDivisionError):
        signals.wait_for(lambda: 1 / 0, lambda: False, "a division")
    with pytest.raises(signals.Stopped):  # Stopping already: the work is not started.
        signals.wait_for(lambda: pytest.fail("started"), lambda: True, "nothing")


def test_a_first_signal_ends_a_wait_on_blocked_work_and_a_second_one_ends_any_wait():
    """The work blocks in C (a lock, as a device wait does) and never ends by itself: the first SIGTERM
    makes the wait give up at once (the work runs on, listed by `left_running()`); with a wait that keeps
    waiting through a stop request (an evaluation round), a second SIGTERM raises `Interrupted`."""
    never = threading.Event()
    stop = signals.StopRequest()
    try:
        timer, start = _signal_later(0.3), time.monotonic()
        with pytest.raises(signals.Stopped):
            signals.wait_for(never.wait, lambda: stop.signum is not None, "blocked work")
        assert stop.signum == signal.SIGTERM and time.monotonic() - start < STOP_WITHIN_S
        assert "blocked work" in signals.left_running()
        timer.join()

        timer, start = _signal_later(0.3), time.monotonic()
        with pytest.raises(signals.Interrupted):
            signals.wait_for(never.wait, lambda: False, "more blocked work")
        assert time.monotonic() - start < STOP_WITHIN_S and "more blocked work" in signals.left_running()
        timer.join()
    finally:
        stop.restore()
        never.set()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # The dropped exception.
def test_a_signal_swallowed_while_the_run_starts_is_a_stop_request():
    """While a run is being built, SIGTERM raises `Interrupted`; where it is raised inside a garbage
    collector callback (jax registers one) Python prints and drops it. The run's stop request then
    starts as requested, so the run stops before it trains (seen: a SIGTERM ignored, the run finished)."""
    raised = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start" and not raised:
            raised.append(True)
            signal.raise_signal(signal.SIGTERM)  # Its handler runs here, inside the callback.

    with signals.raise_on_signals():
        gc.callbacks.append(callback)
        try:
            # The youngest generation only: a full collection in a worker that ran other tests also runs their
            # leftovers' finalizers (once 60 s in the suite), which this test is not about.
            gc.collect(generation=0)
        finally:
            gc.callbacks.remove(callback)
        stop = signals.StopRequest()
        stop.restore()
    assert raised and stop.signum == signal.SIGTERM
    with signals.raise_on_signals():  # A later run starts afresh.
        stop = signals.StopRequest()
        stop.restore()
    assert stop.signum is None


# A chunk of 16,384 PPO updates (8.4 M actor steps per replica) lasts minutes on a CPU.
LONG_CHUNKS = [
    "experiment=ppo_gymnax_cartpole",
    "launcher.steps_per_chunk=16384",
    "eval_every=16777216",
    "logger=csv",
    "progress=false",
]


def _stop_in_the_first_chunk(process: subprocess.Popen, started: str = "compiled in") -> tuple[str, str, float]:
    """SIGTERM once the first chunk runs (the line `started` printed: by default the compiled programs' line);
    the process's output and how long it took to exit after the signal."""
    lines = []
    for line in process.stdout:  # Blocks until the line: start-up and compiling.
        lines.append(line)
        if started in line:
            break
    time.sleep(2)  # The first chunk takes minutes.
    assert process.poll() is None, "".join(lines) + process.stderr.read()[-3000:]
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = process.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"still running {STOP_WITHIN_S} s after SIGTERM: {stderr[-3000:]}")
    return "".join(lines) + stdout, stderr, time.monotonic() - start


@pytest.mark.current
def test_sigterm_stops_a_grid_in_the_middle_of_a_chunk(tmp_path):
    """A 4-job grid (one program over the host devices) stopped by SIGTERM in its first chunk exits
    within seconds with status 143, each job's summary `interrupted` at 0 actor steps."""
    sweep = tmp_path / "sweep"
    process = start_train(
        ["-m", "hydra/launcher=anakin_grid", *LONG_CHUNKS, "max_actor_steps=16777216"]
        + ["agent.learning_rate=1e-4,1e-3", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    )
    stdout, stderr, _ = _stop_in_the_first_chunk(process)
    assert process.returncode == 143, stderr[-3000:]
    assert "Interrupted: stopped by SIGTERM at 0 actor steps" in stdout + stderr
    for job in ("0", "1", "2", "3"):
        summary = read_summary(str(sweep / job))
        assert summary["status"] == "interrupted" and summary["actor_steps"] == 0


@pytest.mark.current
def test_sigterm_stops_an_anakin_run_in_the_middle_of_a_chunk_with_a_checkpoint(tmp_path):
    """The chunk under way is left (it runs on, unrecorded, until the process ends): the checkpoint holds
    the state before it, the summary says `interrupted` at 0 actor steps, the exit status is 143."""
    run = tmp_path / "run"
    process = start_train([*LONG_CHUNKS, "max_actor_steps=16777216", "launcher.num_seeds=2", f"hydra.run.dir={run}"])
    stdout, stderr, _ = _stop_in_the_first_chunk(process)
    assert process.returncode == 143, stderr[-3000:]
    assert f"checkpoint {run}/checkpoints/step_0; the same command resumes it" in stderr
    assert read_summary(str(run))["status"] == "interrupted" and read_summary(str(run))["actor_steps"] == 0
    assert os.listdir(run / "checkpoints") == ["step_0"]
