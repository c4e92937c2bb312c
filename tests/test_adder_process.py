"""The adder process (rl/replay/adder_process.py) on a real reverb server: the same items
as the adder in this process, errors raised here, no writer left behind a killed actor."""

import functools
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import dm_env
import numpy as np
import pytest
import reverb
from dm_env import specs

from rl.replay.adder_process import AdderProcess
from rl.replay.adders import NStepTransitionAdder
from rl.replay.tables import transition_signature
from rl.specs import EnvironmentSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = EnvironmentSpec(
    observations=specs.Array((2,), np.float32, "observation"),
    actions=specs.DiscreteArray(3, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
NUM_ENVS = 4
LENGTHS = (3, 5, 7, 9)  # Each copy's episode length: episodes end at different steps.
STEPS = 30


def make_nstep_adder(table: str, client: reverb.Client) -> NStepTransitionAdder:
    """Module level, so that it pickles into the child."""
    return NStepTransitionAdder(client, table, n_step=3, discount=0.9)


def failing_adder(client: reverb.Client) -> NStepTransitionAdder:
    raise ValueError("no adder for you")


@pytest.fixture
def server():
    tables = [reverb.Table.queue(name, max_size=10_000, signature=transition_signature(SPEC)) for name in ("a", "b")]
    server = reverb.Server(tables, port=None)
    yield server
    server.stop()


def _timestep(step_types, rewards, discounts, observations):
    return dm_env.TimeStep(
        np.asarray(step_types, np.int8),
        np.asarray(rewards, np.float32),
        np.asarray(discounts, np.float32),
        np.asarray(observations, np.float32),
    )


def _drive(adder) -> None:
    """Four copies stepped together for STEPS steps, each restarting its episode at its
    own length, some steps for a subset of copies; observation = (copy, step)."""
    t = [0] * NUM_ENVS
    adder.add_first(_timestep([0] * NUM_ENVS, [0] * NUM_ENVS, [1] * NUM_ENVS, [[c, 0] for c in range(NUM_ENVS)]))
    for k in range(STEPS):
        ids = list(range(NUM_ENVS)) if k % 5 else [0, 2]
        for c in ids:
            t[c] += 1
        lasts = [t[c] == LENGTHS[c] for c in ids]
        adder.add(
            np.array([(k + c) % 3 for c in ids], np.int32),
            _timestep(
                [2 if last else 1 for last in lasts],
                [float(k + c) for c in ids],
                [0.0 if last else 1.0 for last in lasts],
                [[c, t[c]] for c in ids],
            ),
            env_ids=ids,
        )
        ended = [c for c, last in zip(ids, lasts) if last]
        if ended:
            for c in ended:
                t[c] = 0
            adder.add_first(
                _timestep([0] * len(ended), [0] * len(ended), [1] * len(ended), [[c, 0] for c in ended]), ended
            )


def _read(server, table: str, count: int) -> list[tuple]:
    client = reverb.Client(f"localhost:{server.port}")
    assert client.server_info()[table].current_size == count
    dataset = reverb.TrajectoryDataset.from_table_signature(
        client.server_address, table, max_in_flight_samples_per_worker=1
    )
    return [
        tuple(np.asarray(x).tolist() for x in (s.observation, s.action, s.reward, s.discount, s.next_observation))
        for s in (sample.data for sample in dataset.take(count).as_numpy_iterator())
    ]


def test_an_adder_process_writes_the_same_items_in_the_same_order(server):
    address = f"localhost:{server.port}"
    here = make_nstep_adder("a", reverb.Client(address))
    _drive(here)
    here.reset()
    there = AdderProcess(functools.partial(make_nstep_adder, "b"), address, calls_per_message=3)
    try:
        _drive(there)
        there.reset()
        assert there.num_items == here.num_items > 40
    finally:
        there.close()
    assert _read(server, "b", there.num_items) == _read(server, "a", here.num_items)


def test_an_error_in_the_child_is_raised_by_the_actor_and_again_after(server):
    adder = AdderProcess(failing_adder, f"localhost:{server.port}")
    try:
        adder.add_first(_timestep([0], [0], [1], [[0, 0]]))
        with pytest.raises(ValueError, match="no adder for you"):
            adder.sync()
        with pytest.raises(ValueError, match="no adder for you"):  # Every later call says so.
            adder.add_first(_timestep([0], [0], [1], [[0, 0]]))
    finally:
        adder.close()


def test_a_call_that_raises_in_the_child_is_raised_here(server):
    adder = AdderProcess(functools.partial(make_nstep_adder, "a"), f"localhost:{server.port}", calls_per_message=1)
    try:
        # A step of a copy whose episode never started: the real adder's KeyError.
        adder.add(np.array([0], np.int32), _timestep([1], [1.0], [1.0], [[0, 1]]), env_ids=[3])
        with pytest.raises(KeyError):
            adder.sync()
    finally:
        adder.close()


def test_closing_stops_the_child(server):
    adder = AdderProcess(functools.partial(make_nstep_adder, "a"), f"localhost:{server.port}")
    adder.reset()  # Answered: the child is serving.
    process = adder._process  # noqa: SLF001
    adder.close()
    assert not process.is_alive() and process.exitcode == 0


@pytest.mark.parametrize("serving", [True, False], ids=["serving", "starting"])
def test_the_child_exits_when_its_actor_is_killed(tmp_path, serving):
    """A SIGKILLed parent cannot stop its child: a serving child notices the closed pipe;
    one still starting (its server gone with the parent, so building its writer would
    wait for ever) notices it has another parent."""
    script = textwrap.dedent(
        f"""
        import functools, sys, time
        sys.path.insert(0, {ROOT!r}); sys.path.insert(0, {os.path.dirname(__file__)!r})
        import reverb
        from test_adder_process import SPEC, make_nstep_adder
        from rl.replay.adder_process import AdderProcess
        from rl.replay.tables import transition_signature
        server = reverb.Server([reverb.Table.queue("a", 100, signature=transition_signature(SPEC))], port=None)
        adder = AdderProcess(functools.partial(make_nstep_adder, "a"), f"localhost:{{server.port}}")
        if {serving!r}:
            adder.reset()  # Answered: the child is serving.
        print(adder.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 60  # A starting child imports reverb first.
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: it has exited, its parent is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_arrays_and_timesteps_of_arrays_travel_as_bytes_and_come_back_equal():
    from rl.replay.adder_process import _pack, _unpack

    arrays = [np.array(1.5, np.float32), np.arange(6, dtype=np.int64).reshape(3, 2), np.array([True, False])]
    for array in arrays:
        packed = _pack(array)
        assert type(packed) is tuple and type(packed[1]) is bytes
        back = _unpack(pickle.loads(pickle.dumps(packed)))
        assert back.dtype == array.dtype and back.shape == array.shape and np.array_equal(back, array)
    step = _timestep([1, 2], [1.0, 2.0], [1.0, 0.0], [[0, 1], [1, 1]])
    back = _unpack(pickle.loads(pickle.dumps(_pack(step))))
    assert type(back) is dm_env.TimeStep
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(back, step))
    nested = step._replace(observation={"x": np.zeros(2)})  # Not all arrays: pickled as it is.
    assert _pack(nested) is nested and _unpack(nested) is nested
    assert _pack([0, 1]) == [0, 1] and _pack(None) is None
