"""Stopping a run within seconds: a wait on a device gives up on the first SIGINT or SIGTERM
(rl.experiments.signals.wait_for) and a second one ends it; a signal swallowed while the run starts is
still a stop; a grid and an anakin run stopped in the middle of a long chunk exit at once, with their
summaries (status `interrupted`) and, for the run, a checkpoint of the last consistent state. Each signal is
answered at once (rl/experiments/signal_watcher.py): a first in one line within a second, a second by the
process's end within seconds, under sebulba and anakin, though the main thread waits on a slow computation."""

from __future__ import annotations

import gc
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

import pytest

from conftest import ROOT, read_summary, start_train
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

        timer, start = _signal_later(signals.REPEAT_S + 0.3), time.monotonic()  # A second, not the first again.
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


def test_a_signal_sent_twice_at_once_while_the_run_starts_is_raised_once():
    """While the run is built, the same SIGTERM twice at once (as `timeout` sends it) raises `Interrupted` once: a
    second raise would land in the handling of the first."""
    with signals.raise_on_signals():
        with pytest.raises(signals.Interrupted):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # Within `signals.REPEAT_S`: the same request, nothing raised.
        stop = signals.StopRequest()
        stop.restore()
    assert stop.signum == signal.SIGTERM


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


# The bounds (issue 58): a first signal's line within a second, a second signal's end within 10 s.
FIRST_LINE_WITHIN_S = 1.0
SECOND_ENDS_WITHIN_S = 10.0


class Lines:
    """A process's stdout and stderr lines as they come, each with the moment it was read."""

    def __init__(self, process: subprocess.Popen):
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[str] = []
        for stream in (process.stdout, process.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, words: str, timeout: float) -> tuple[float, str]:
        """(when it was read, the line) of the first line holding `words`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                read, line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                pytest.fail(f"no line with {words!r} in {timeout} s; seen: {self.seen[-20:]}")
            self.seen.append(line)
            if words in line:
                return read, line


def _two_signals_in_a_slow_computation(overrides: list[str], started: Callable[[], bool]) -> tuple[Lines, str, str]:
    """A scripts/train.py run signalled twice (SIGTERM) while its main thread waits on a computation that lasts
    minutes, a few seconds after `started()`: the first signal's line must come within `FIRST_LINE_WITHIN_S`, and
    the process must end within `SECOND_ENDS_WITHIN_S` of the second; (the lines, the first's, the second's)."""
    process = start_train(overrides)
    lines = Lines(process)
    try:
        deadline = time.monotonic() + 600
        while not started():
            assert process.poll() is None and time.monotonic() < deadline, lines.seen[-20:]
            time.sleep(0.05)
        time.sleep(3)  # Into the slow computation.
        assert process.poll() is None, lines.seen[-20:]
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        said, first = lines.wait_for("stopping on SIGTERM", timeout=60)
        assert said - sent < FIRST_LINE_WITHIN_S, f"the first signal's line came {said - sent:.1f} s after it"
        time.sleep(1)
        assert process.poll() is None, "the run should still finish the computation in flight"
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after a second SIGTERM: {lines.seen[-20:]}")
        ended = time.monotonic() - sent
        assert ended < SECOND_ENDS_WITHIN_S, f"the process ended {ended:.1f} s after the second signal"
        _, second = lines.wait_for("second SIGTERM", timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, lines.seen[-20:]
    return lines, first, second


def _evaluated_once(run) -> Callable[[], bool]:
    """Whether the run's untrained round (its first evaluator row) is written."""
    path = run / "logs" / "evaluator.csv"
    return lambda: path.exists() and len(path.read_text().splitlines()) >= 2


@pytest.mark.current
def test_under_sebulba_signals_are_answered_at_once_in_a_slow_update(tmp_path):
    """A PPO update of 100,000 epochs on CartPole takes minutes: the main thread waits on it in C++, where Python
    runs no signal handler. The first SIGTERM is still said at once, and the second ends the process within
    seconds, saying what is lost (no checkpoint yet: its steps), with neither checkpoint nor summary written."""
    run = tmp_path / "run"
    overrides = ["experiment=ppo_cartpole", "launcher=sebulba", "agent.num_epochs=100000", "max_actor_steps=1048576"]
    overrides += ["eval_every=524288", "eval_episodes=2", "logger=csv", "progress=false", f"hydra.run.dir={run}"]
    _, first, second = _two_signals_in_a_slow_computation(overrides, _evaluated_once(run))
    assert first.startswith("stopping on SIGTERM: finishing the update in flight, then a checkpoint ("), first
    # Nothing trained yet, or the updates dispatched before the main thread's wait: none written.
    assert second.startswith("second SIGTERM: ending the process now, without a checkpoint or summary; "), second
    assert second.endswith(" (the same command starts the run over)"), second
    assert not (run / "summary.json").exists() and not list(run.glob("checkpoints/step_*"))


@pytest.mark.current
def test_under_anakin_signals_are_answered_at_once_in_a_slow_evaluation_round(tmp_path):
    """Under anakin a first signal gives up on the chunks in flight but lets an evaluation round finish: the
    untrained round of 65,536 Pendulum episodes with a wide policy takes minutes. The first SIGTERM is said at
    once, with the checkpoint that is to follow at 0 actor steps; the second ends the process within seconds."""
    run = tmp_path / "run"
    overrides = ["experiment=ppo_gymnax_cartpole", "environment.name=Pendulum-v1", "eval_episodes=65536"]
    overrides += ["network.policy_hidden_sizes=[512,512]"]  # A round of minutes: the signals come in its first seconds.
    overrides += ["launcher.steps_per_chunk=1", "max_actor_steps=1048576", "eval_every=524288", "logger=csv"]
    overrides += ["progress=false", f"hydra.run.dir={run}"]
    compiled = []

    def started() -> bool:
        log = run / "train.log"
        compiled.append(log.exists() and "compiled in" in log.read_text())
        return compiled[-1]

    _, first, second = _two_signals_in_a_slow_computation(overrides, started)
    assert first == (
        "stopping on SIGTERM: finishing the evaluation round in flight, then a checkpoint at 0 actor steps; "
        "a second signal ends the process at once, without it"
    )
    assert second == (
        "second SIGTERM: ending the process now, without a checkpoint or summary; nothing was trained yet and no "
        "checkpoint written (the same command starts the run over)"
    )
    assert not (run / "summary.json").exists()


# A process with the run's watcher and stop request that takes SIGTERM twice at once (as `timeout` sends it: to
# the command, then to its process group), then, `LATER_S` on, once more.
_TWICE_AT_ONCE = """
import os, signal, sys, time
from rl.experiments import signal_watcher, signals
signal_watcher.watch_signals(lambda line: print(line, flush=True))
stop = signals.StopRequest()
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5.0)  # Past `signals.REPEAT_S` and, were the repeat a second signal, its `GRACE_S`.
print("still running, stop requested by", signals.signal_name(stop.signum), flush=True)
if sys.argv[1] == "again":
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    except signals.Interrupted as interrupted:  # As scripts/train.py ends on a second signal.
        signals.end_process(interrupted.exit_code)
"""


@pytest.mark.parametrize("then", ["nothing", "again"])
def test_a_signal_sent_twice_at_once_is_one_stop_request_and_a_later_one_a_second(then):
    """`timeout` signals the command and its process group: a run took the one SIGTERM twice and ended without its
    checkpoint. The same signal within `signals.REPEAT_S` of the first is that one; a signal after it is a second
    (it ends the process with 128 + its number)."""
    process = subprocess.run(
        [sys.executable, "-c", _TWICE_AT_ONCE, then], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    lines = process.stdout.splitlines()
    assert lines[:2] == [
        "stopping on SIGTERM: the run has not started training; it ends before it does",
        "still running, stop requested by SIGTERM",
    ], process.stdout + process.stderr
    if then == "nothing":
        assert process.returncode == 0 and len(lines) == 2
    else:
        assert lines[2:] == ["second SIGTERM: ending the process now"] and process.returncode == 128 + signal.SIGTERM
