"""The deterministic mode's in-process replay (rl/replay/server.py): reverb's table
semantics with a seeded choice of items."""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rl.replay.adders import NStepTransitionAdder, item_inserter
from rl.replay.seeded import SeededReplay, SeededTable
from rl.replay.server import PrefetchingIterator, learner_iterator

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

SIGNATURE = tf.TensorSpec((2,), tf.float32)


def _table(sampler=None, max_size=100, name="t"):
    return reverb.Table(
        name=name,
        sampler=sampler or reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=SIGNATURE,
    )


def _filled(table: SeededTable, count: int) -> SeededTable:
    for value in range(count):
        table.insert(1.0, [np.array([value, -value], np.float32)])
    return table


def test_the_same_seed_draws_the_same_batches_and_another_seed_others():
    draws = []
    for seed in (0, 0, 1):
        table = _filled(SeededTable(_table(), (seed, 0)), 50)
        draws.append([table.sample(8)[0].tolist() for _ in range(5)])
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]


def test_uniform_samples_keep_reverb_fields_and_the_item_data():
    table = _filled(SeededTable(_table(), (3, 0)), 10)
    keys, probabilities, sizes, (data,) = table.sample(64)
    assert keys.dtype == np.uint64 and set(keys.tolist()) <= set(range(10))
    assert np.allclose(probabilities, 0.1) and (sizes == 10).all()
    assert np.array_equal(data[:, 0], keys.astype(np.float32)) and np.array_equal(data[:, 1], -data[:, 0])


def test_fifo_removal_keeps_the_newest_max_size_items_under_their_keys():
    table = _filled(SeededTable(_table(max_size=4), (0, 0)), 10)
    assert table.size == 4 and table.inserts == 10
    keys, probabilities, _, (data,) = table.sample(200)
    assert set(keys.tolist()) == {6, 7, 8, 9}
    assert np.array_equal(data[:, 0], keys.astype(np.float32))  # A key names its own item.
    assert np.allclose(probabilities, 0.25)


def test_prioritized_sampling_follows_priority_to_the_exponent_and_updates_by_key():
    table = SeededTable(_table(reverb.selectors.Prioritized(0.5)), (0, 0))
    for value, priority in enumerate([1.0, 4.0, 16.0]):
        table.insert(priority, [np.array([value, 0], np.float32)])
    keys, probabilities, _, _ = table.sample(4000)
    expected = np.array([1.0, 2.0, 4.0]) / 7.0  # p ** 0.5, normalised.
    assert np.allclose(probabilities, expected[keys.astype(int)])
    assert np.allclose(np.bincount(keys.astype(int), minlength=3) / 4000, expected, atol=0.03)
    table.mutate_priorities({0: 0.0, 2: 0.0, 99: 5.0})  # 99 is not in the table: ignored.
    assert set(table.sample(100)[0].tolist()) == {1}


def test_a_queue_hands_out_each_item_once_oldest_first():
    replay = SeededReplay([reverb.Table.queue("q", 10, signature=SIGNATURE)], seed=0)
    writer = replay.trajectory_writer()
    insert = item_inserter(writer)
    for value in range(5):
        insert("q", 1.0, [np.array([value, 0], np.float32)])
    keys, _, _, (data,) = replay.table("q").sample(3)
    assert keys.tolist() == [0, 1, 2] and data[:, 0].tolist() == [0, 1, 2]
    with pytest.raises(RuntimeError, match="holds 2 items"):
        replay.table("q").sample(3)


def test_an_nstep_adder_writes_the_same_items_to_reverb_and_to_the_seeded_replay():
    import dm_env
    from dm_env import specs

    from rl.replay.adders import transition_codec
    from rl.core import EnvironmentSpec

    spec = EnvironmentSpec(
        observations=specs.Array((4,), np.float32, "observation"),
        actions=specs.DiscreteArray(2, name="action"),
        rewards=specs.Array((), np.float32, "reward"),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0, "discount"),
    )
    codec = transition_codec(spec)
    table = reverb.Table.queue("q", 100, signature=codec.signature())
    server = reverb.Server([table])
    observations = np.arange(20, dtype=np.float32).reshape(5, 1, 4)
    written = []
    try:
        for store in (reverb.Client(f"localhost:{server.port}"), SeededReplay([table], seed=0)):
            adder = NStepTransitionAdder(store, "q", n_step=2, discount=0.9, codec=codec)
            adder.add_first(dm_env.TimeStep(np.array([dm_env.StepType.FIRST]), None, None, observations[0]))
            for k in range(1, 5):
                kind, discount = (dm_env.StepType.LAST, 0.0) if k == 4 else (dm_env.StepType.MID, 1.0)
                timestep = dm_env.TimeStep(
                    np.array([kind]),
                    np.array([float(k)], np.float32),
                    np.array([discount], np.float32),
                    observations[k],
                )
                adder.add(np.array([k % 2], np.int32), timestep)
            adder.reset()
            assert adder.num_items == 4
            iterator = learner_iterator(store, "q", 4, decode=codec.decode)
            assert isinstance(iterator, PrefetchingIterator) != isinstance(store, SeededReplay)
            written.append(next(iterator).data)
            iterator.close()
    finally:
        server.stop()
    reverb_batch, seeded_batch = written
    assert reverb_batch.reward.shape == (4,)
    for field in reverb_batch._fields:
        assert np.array_equal(getattr(reverb_batch, field), getattr(seeded_batch, field)), field


def test_reverb_is_the_version_whose_private_writer_item_inserter_calls():
    """`item_inserter` calls reverb 0.14's C++ trajectory writer directly (for speed):
    a newer reverb must be checked against it before the pin moves."""
    from importlib.metadata import version

    assert version("dm-reverb") == "0.14.0"
    server = reverb.Server([reverb.Table.queue("q", 10)])
    try:
        client = reverb.Client(f"localhost:{server.port}")
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        item_inserter(writer)("q", 1.0, [np.array([1.0, 2.0], np.float32)])
        writer.flush()
        assert client.server_info()["q"].current_size == 1
        writer.close()
    finally:
        server.stop()
