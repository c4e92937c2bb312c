"""rl.replay.server: a replay server that leaves no temporary checkpoint directory behind."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import reverb

from rl.replay.server import make_server

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb


def test_a_server_without_a_checkpointer_writes_nothing_to_disk(tmp_path, monkeypatch):
    """reverb's own default would checkpoint into a `tempfile.mkdtemp()` folder; the temporary folder here is the
    test's own (the system's is shared with the tests running beside it, which may make folders there)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(os.listdir(tempfile.gettempdir()))
    server = make_server([reverb.Table.queue("queue", 10)])
    try:
        client = reverb.Client(f"localhost:{server.port}")
        client.insert([np.zeros(2, np.float32)], {"queue": 1.0})
        (sample,) = list(client.sample("queue", num_samples=1))
        assert sample[0].data[0].tolist() == [0.0, 0.0]
        with pytest.raises(ValueError, match="no Checkpointer"):
            client.checkpoint()
    finally:
        server.stop()
    assert {name for name in set(os.listdir(tempfile.gettempdir())) - before if name.startswith("tmp")} == set()


def test_a_given_checkpointer_is_used(tmp_path):
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "replay"))
    server = make_server([reverb.Table.queue("queue", 10)], checkpointer=checkpointer)
    try:
        path = reverb.Client(f"localhost:{server.port}").checkpoint()
    finally:
        server.stop()
    assert path.startswith(str(tmp_path / "replay"))


def test_a_writer_facing_a_dead_server_raises_a_timeout_naming_it_after_its_bound():
    """The actor's adder never hangs on a replay server that died: its next flush waits
    out its bound, then raises one error naming the server, the call and the bound."""
    import time

    import dm_env
    from dm_env import specs

    from rl.replay.adders import NStepTransitionAdder, ReplayTimeoutError
    from rl.replay.adders import transition_codec
    from rl.replay.server import make_sequence_table
    from rl.core import EnvironmentSpec

    spec = EnvironmentSpec(
        observations=specs.Array((4,), np.float32),
        actions=specs.DiscreteArray(2),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )
    signature = transition_codec(spec).signature()
    server = make_server([make_sequence_table("t", signature, 1000, reverb.rate_limiters.MinSize(1), None)])
    client = reverb.Client(f"localhost:{server.port}")
    adder = NStepTransitionAdder(
        client, "t", 1, 0.99, max_pending_items=4, timeout_ms=1500, codec=transition_codec(spec)
    )

    def timestep(kind):
        return dm_env.TimeStep(
            np.array([kind]), np.zeros(1, np.float32), np.ones(1, np.float32), np.zeros((1, 4), np.float32)
        )

    adder.add_first(timestep(dm_env.StepType.FIRST))
    for _ in range(8):
        adder.add(np.zeros(1, np.int32), timestep(dm_env.StepType.MID))
    server.stop()
    start = time.monotonic()
    with pytest.raises(ReplayTimeoutError) as raised:
        for _ in range(8):  # The fourth item's flush is the first call that waits.
            adder.add(np.zeros(1, np.int32), timestep(dm_env.StepType.MID))
    assert time.monotonic() - start >= 1.5  # It waited out its bound, no less ...
    assert str(raised.value) == (  # ... and said what did not complete, where, and for how long.
        f"replay server at localhost:{server.port}: a flush to table 't' did not complete within 1.5 s"
    )


def _one_step_timesteps():
    import dm_env

    def timestep(kind):
        return dm_env.TimeStep(
            np.array([kind]), np.zeros(1, np.float32), np.ones(1, np.float32), np.zeros((1, 4), np.float32)
        )

    return timestep(dm_env.StepType.FIRST), timestep(dm_env.StepType.MID)


def test_a_writer_whose_server_was_replaced_gives_up_at_the_next_slice_not_at_its_bound(monkeypatch):
    """A replay node restarted on the same address never confirms the items its
    predecessor lost: a client that can tell (`WatchedClient.replaced`) ends the wait
    after one slice with an error that says why, instead of waiting out its 120 s."""
    import time

    from rl.replay import adders
    from rl.replay.client import WatchedClient

    monkeypatch.setattr(adders, "WRITE_SLICE_MS", 300)
    server = make_server([reverb.Table.queue("q", 1000)])
    port, probes, replacement = server.port, [], []

    def replaced():
        probes.append(time.monotonic())
        return bool(replacement)

    client = WatchedClient(f"localhost:{port}", replaced)
    adder = adders.NStepTransitionAdder(client, "q", 1, 0.99, max_pending_items=4, timeout_ms=120_000)
    first, mid = _one_step_timesteps()
    adder.add_first(first)
    for _ in range(8):
        adder.add(np.zeros(1, np.int32), mid)
    assert probes == []  # Writes a live server confirms at once never ask.
    server.stop()
    replacement.append(make_server([reverb.Table.queue("q", 1000)], port=port))
    try:
        start = time.monotonic()
        with pytest.raises(adders.ReplayTimeoutError) as raised:
            for _ in range(8):
                adder.add(np.zeros(1, np.int32), mid)
        waited = time.monotonic() - start
    finally:
        replacement[0].stop()
    assert str(raised.value) == (
        f"replay server at localhost:{port}: a flush to table 'q' was cut short, the server was replaced"
    )
    assert len(probes) == 1 and waited < 60  # One slice, then the probe: far short of the bound.


def test_a_write_blocked_longer_than_a_slice_completes_when_the_server_takes_it(monkeypatch):
    """Slices do not change what a wait means: a flush held by a full queue for several
    slices (the probe says the server is the same) completes once a reader makes room."""
    import threading
    import time

    from rl.replay import adders
    from rl.replay.client import WatchedClient

    monkeypatch.setattr(adders, "WRITE_SLICE_MS", 200)
    server = make_server([reverb.Table.queue("q", 4)])
    probes = []
    client = WatchedClient(f"localhost:{server.port}", lambda: probes.append(1) or False)
    adder = adders.NStepTransitionAdder(client, "q", 1, 0.99, max_pending_items=4, timeout_ms=60_000)
    taken = []

    def drain_later():
        time.sleep(1.5)
        reader = reverb.Client(f"localhost:{server.port}")
        while len(taken) < 12:
            taken.extend(reader.sample("q", num_samples=1, emit_timesteps=False))

    reader = threading.Thread(target=drain_later)
    reader.start()
    try:
        first, mid = _one_step_timesteps()
        adder.add_first(first)
        for _ in range(12):  # The 12th item's flush waits for the queue (capacity 4) to drain.
            adder.add(np.zeros(1, np.int32), mid)
        adder.reset()
        reader.join(timeout=60)
    finally:
        server.stop()
    assert len(taken) == 12 and len(probes) >= 2  # It waited more than one slice, then completed.
