"""rl.replay.server: a replay server that leaves no temporary checkpoint directory behind."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import reverb

from rl.replay.server import make_server


def test_a_server_without_a_checkpointer_writes_nothing_to_disk():
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
    from rl.replay.codecs import transition_codec
    from rl.replay.tables import make_transition_table
    from rl.specs import EnvironmentSpec

    spec = EnvironmentSpec(
        observations=specs.Array((4,), np.float32),
        actions=specs.DiscreteArray(2),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )
    server = make_server([make_transition_table("t", spec, 1000, reverb.rate_limiters.MinSize(1))])
    client = reverb.Client(f"localhost:{server.port}")
    adder = NStepTransitionAdder(client, "t", 1, 0.99, max_pending_items=4, timeout_ms=1500, codec=transition_codec(spec))

    def timestep(kind):
        return dm_env.TimeStep(np.array([kind]), np.zeros(1, np.float32), np.ones(1, np.float32), np.zeros((1, 4), np.float32))

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
