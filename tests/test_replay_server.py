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
