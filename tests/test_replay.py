"""The n-step adder against hand-computed returns, on a real reverb server."""

import dm_env
import numpy as np
import pytest
import reverb
import tree

from rl.replay.adders import NStepTransitionAdder, n_step_return
from rl.replay.adders import ColumnCodec
from rl.replay.server import ReplayRatio
from rl.core import EnvironmentSpec, Transition
from dm_env import specs

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

GAMMA = 0.9
SPEC = EnvironmentSpec(
    observations=specs.Array((1,), np.float32, "observation"),
    actions=specs.DiscreteArray(3, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)


@pytest.fixture
def replay():
    table = reverb.Table.queue("queue", max_size=1000, signature=ColumnCodec(SPEC).signature())
    server = reverb.Server([table], port=None)
    client = reverb.Client(f"localhost:{server.port}")
    yield client
    server.stop()


@pytest.fixture
def sampled():
    """A uniform table of n-step transitions (sampled without limit once it holds one) and a client of its server,
    which stops after the test."""
    table = reverb.Table(
        "uniform",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=ColumnCodec(SPEC).signature(),
    )
    server = reverb.Server([table], port=None)
    yield reverb.Client(f"localhost:{server.port}")
    server.stop()


def _obs(i):
    return np.array([i], np.float32)


def _batch(step_types, rewards, discounts, observations):
    """A timestep batched over environment copies, as a VectorEnvironment returns it."""
    return dm_env.TimeStep(
        np.asarray(step_types, np.int8),
        np.asarray(rewards, np.float32),
        np.asarray(discounts, np.float32),
        np.stack(observations),
    )


def _write_episode(adder, rewards, last_discount):
    """Episode with observations 0..T, action t = t % 3, reward rewards[t] (one copy)."""
    adder.add_first(_batch([dm_env.StepType.FIRST], [0.0], [1.0], [_obs(0)]))
    for t, reward in enumerate(rewards):
        last = t == len(rewards) - 1
        discount = last_discount if last else 1.0
        step_type = dm_env.StepType.LAST if last else dm_env.StepType.MID
        adder.add(np.array([t % 3], np.int32), _batch([step_type], [reward], [discount], [_obs(t + 1)]))


def _read_all(client, count):
    """`count` items off the queue once the writer's items are there; the sampler gives up on an empty
    queue after 100 ms (a blocked sampler takes 3 s to cancel when the dataset ends)."""
    import time

    deadline = time.monotonic() + 30
    while client.server_info()["queue"].current_size < count and time.monotonic() < deadline:
        time.sleep(0.01)
    dataset = reverb.TrajectoryDataset.from_table_signature(
        client.server_address, "queue", max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=100
    )
    return [sample.data for sample in dataset.take(count).as_numpy_iterator()]


def _expected(rewards, last_discount, n):
    """Hand-rolled n-step transitions: (obs, action, return, bootstrap discount, next obs)."""
    discounts = [1.0] * (len(rewards) - 1) + [last_discount]
    rows = []
    for t in range(len(rewards)):
        end = min(t + n, len(rewards))
        ret = sum(GAMMA ** (k - t) * rewards[k] for k in range(t, end))
        boot = GAMMA ** (end - t) * np.prod(discounts[t:end])
        rows.append((t, t % 3, ret, boot, end))
    return rows


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("last_discount", [0.0, 1.0], ids=["terminated", "truncated"])
def test_n_step_transitions_match_hand_computed(replay, n, last_discount):
    rewards = [1.0, 2.0, 3.0, 4.0, 5.0]
    adder = NStepTransitionAdder(replay, "queue", n_step=n, discount=GAMMA)
    _write_episode(adder, rewards, last_discount)
    assert adder.num_items == len(rewards)
    items = _read_all(replay, len(rewards))
    for item, (t, action, ret, boot, end) in zip(items, _expected(rewards, last_discount, n)):
        assert item.observation[0] == t and item.next_observation[0] == end
        assert item.action == action
        assert item.reward == pytest.approx(ret, rel=1e-6)
        assert item.discount == pytest.approx(boot, rel=1e-6)


def test_n3_by_hand(replay):
    """The same rule written out once with numbers, independent of `_expected`."""
    adder = NStepTransitionAdder(replay, "queue", n_step=3, discount=GAMMA)
    _write_episode(adder, [1.0, 2.0, 3.0, 4.0], last_discount=0.0)
    items = _read_all(replay, 4)
    returns = [float(i.reward) for i in items]
    discounts = [float(i.discount) for i in items]
    assert returns == pytest.approx([1 + 0.9 * 2 + 0.81 * 3, 2 + 0.9 * 3 + 0.81 * 4, 3 + 0.9 * 4, 4.0])
    assert discounts == pytest.approx([0.729, 0.0, 0.0, 0.0])


def test_episodes_do_not_leak_into_each_other(replay):
    adder = NStepTransitionAdder(replay, "queue", n_step=3, discount=GAMMA)
    _write_episode(adder, [1.0, 1.0], last_discount=0.0)
    _write_episode(adder, [10.0, 10.0], last_discount=0.0)
    items = _read_all(replay, 4)
    assert [float(i.reward) for i in items] == pytest.approx([1.9, 1.0, 19.0, 10.0])


def test_n_step_return_stops_at_termination():
    assert n_step_return([1.0, 1.0, 1.0], [1.0, 0.0, 1.0], 0.5) == (1.5, 0.0)


def test_copies_of_a_vector_never_mix(replay):
    """Two copies stepped together, with episodes of different lengths: every item holds
    one copy's consecutive steps (observation = 100 * copy + step)."""
    adder = NStepTransitionAdder(replay, "queue", n_step=2, discount=GAMMA)
    obs = lambda copy, t: np.array([100 * copy + t], np.float32)  # noqa: E731
    adder.add_first(_batch([dm_env.StepType.FIRST] * 2, [0, 0], [1, 1], [obs(0, 0), obs(1, 0)]))
    lengths = [2, 4]
    for t in range(1, 5):
        ids = [copy for copy in (0, 1) if t <= lengths[copy]]
        step_types = [dm_env.StepType.LAST if t == lengths[c] else dm_env.StepType.MID for c in ids]
        adder.add(
            np.array([7 + c for c in ids], np.int32),
            _batch(
                step_types, [1.0] * len(ids), [0.0 if t == lengths[c] else 1.0 for c in ids], [obs(c, t) for c in ids]
            ),
            env_ids=ids,
        )
    assert adder.num_items == 6
    items = sorted(_read_all(replay, 6), key=lambda item: float(item.observation[0]))
    pairs = [(int(i.observation[0]), int(i.next_observation[0]), int(i.action)) for i in items]
    assert pairs == [(0, 2, 7), (1, 2, 7), (100, 102, 8), (101, 103, 8), (102, 104, 8), (103, 104, 8)]
    assert [float(i.reward) for i in items] == pytest.approx([1.9, 1.0, 1.9, 1.9, 1.9, 1.0])


def test_replay_ratio_learner_rule_and_limiter():
    ratio = ReplayRatio(samples_per_insert=2.0, min_size_to_sample=10, error_buffer=8.0)
    assert not ratio.can_sample(inserts=9, samples=0)  # below the minimum size
    assert ratio.can_sample(inserts=10, samples=0)  # target 0: a batch may be taken
    assert not ratio.can_sample(inserts=10, samples=1)
    assert ratio.can_sample(inserts=11, samples=2)  # target 2
    assert not ratio.can_sample(inserts=11, samples=3)
    assert (ratio.min_diff, ratio.max_diff) == (12.0, 28.0)
    limiter = ratio.make_rate_limiter()
    assert isinstance(limiter, reverb.rate_limiters.SampleToInsertRatio)


def test_adder_keeps_the_writer_below_reverbs_pending_items_warning(sampled, capfd):
    """Reverb 0.14 prints 'pending items is alarmingly high' from about 50 unconfirmed
    items; the adder flushes often enough that a fast actor never gets there, even with 8
    copies ending episodes (n-step tails) in the same step."""
    adder = NStepTransitionAdder(sampled, "uniform", n_step=5, discount=GAMMA)
    copies = 8
    first = _batch([dm_env.StepType.FIRST] * copies, [0] * copies, [1] * copies, [_obs(0)] * copies)
    adder.add_first(first)
    for t in range(1, 4001):
        last = t % 20 == 0  # Every copy ends an episode at once: 5 items each.
        step_type = dm_env.StepType.LAST if last else dm_env.StepType.MID
        timestep = _batch([step_type] * copies, [1.0] * copies, [1.0] * copies, [_obs(t)] * copies)
        adder.add(np.zeros(copies, np.int32), timestep)
        if last:
            adder.add_first(first)
    adder.reset()
    assert adder.num_items == 4000 * copies
    assert "alarmingly" not in capfd.readouterr().err


def test_prefetching_iterator_yields_the_plain_iterators_items_and_stops_cleanly(sampled):
    from rl.replay.server import PrefetchingIterator, make_dataset

    adder = NStepTransitionAdder(sampled, "uniform", n_step=1, discount=GAMMA)
    _write_episode(adder, [float(r) for r in range(64)], last_discount=0.0)
    adder.reset()
    plain = list(make_dataset(sampled.server_address, "uniform", 8).take(6).as_numpy_iterator())
    iterator = PrefetchingIterator(iter(plain))
    prefetched = list(iterator)
    assert len(prefetched) == len(plain) == 6
    for batch, sample in zip(prefetched, plain):
        assert np.array_equal(batch.keys, sample.info.key) and batch.keys.shape == (8,)
        assert np.array_equal(batch.probabilities, sample.info.probability)
        for got, expected in zip(batch.data, sample.data):
            assert np.array_equal(np.asarray(got), expected)
    with pytest.raises(StopIteration):
        next(iterator)  # Stays finished.
    iterator._thread.join(timeout=10)
    assert not iterator._thread.is_alive()


def test_closing_a_prefetching_iterator_wakes_a_waiting_learner():
    import threading

    from rl.replay.server import PrefetchingIterator

    blocked = threading.Event()

    def never_ending():
        blocked.wait()  # A source with nothing to give (replay that cannot be sampled).
        yield None

    iterator = PrefetchingIterator(never_ending())
    outcome = []
    consumer = threading.Thread(target=lambda: outcome.append(next(iterator, "stopped")))
    consumer.start()
    iterator.close()
    consumer.join(timeout=10)
    assert outcome == ["stopped"]
    blocked.set()


def test_closing_a_prefetching_iterator_ends_its_reverb_sampler_while_the_server_is_up(sampled):
    """`close` closes the batches' generator once the prefetching thread has left, releasing reverb's dataset
    iterator then, not whenever a garbage collection finds it (by then the server may be stopped)."""
    from rl.replay.server import make_replay_iterator

    adder = NStepTransitionAdder(sampled, "uniform", n_step=1, discount=GAMMA)
    _write_episode(adder, [1.0] * 16, last_discount=0.0)
    adder.reset()  # Once its items are confirmed.
    iterator = make_replay_iterator(sampled.server_address, "uniform", 4, timeout_s=30)
    assert next(iterator).keys.shape == (4,)
    batches = iterator._source
    assert batches.gi_frame is not None  # Suspended in reverb's dataset, which it holds.
    iterator.close()
    assert not iterator._thread.is_alive() and batches.gi_frame is None  # Closed: the dataset released.


def test_sampling_that_gets_no_batch_within_its_bound_names_the_server_and_table():
    """A learner whose replay gives nothing (the rate limiter never allows a sample, or
    the server is gone) raises a ReplayTimeoutError after `timeout_s`, not a hang."""
    from rl.replay.adders import ReplayTimeoutError
    from rl.replay.server import make_replay_iterator

    table = reverb.Table(
        "starved",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(10),
        signature=ColumnCodec(SPEC).signature(),
    )
    server = reverb.Server([table], port=None)
    try:
        address = f"localhost:{server.port}"
        iterator = make_replay_iterator(address, "starved", 4, timeout_s=0.5)
        with pytest.raises(ReplayTimeoutError) as raised:
            next(iterator)
        iterator.close()
    finally:
        server.stop()
    assert str(raised.value) == (
        f"replay server at {address}: sampling 4 items from table 'starved': no batch within 0.5 s"
        " (the server is gone or unreachable, or no actor inserts any more)"
    )


def test_packed_codec_round_trips_a_transition_exactly():
    from rl.replay.adders import ColumnCodec, PackedCodec, transition_codec

    spec = EnvironmentSpec(
        observations={"position": specs.Array((2, 3), np.float32), "flag": specs.Array((), np.bool_)},
        actions=specs.DiscreteArray(5),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )
    codec = transition_codec(spec)
    assert isinstance(codec, PackedCodec) and codec.size == 2 * (6 + 1) + 3
    rng = np.random.default_rng(0)

    def observation():
        return {"position": rng.normal(size=(2, 3)).astype(np.float32), "flag": np.bool_(rng.integers(2))}

    transitions = [
        Transition(observation(), np.int32(4 - i), np.float32(0.5 * i), np.float32(0.99), observation())
        for i in range(3)
    ]
    packed = np.stack([codec.encode(t)[0] for t in transitions])
    assert packed.shape == (3, codec.size) and packed.dtype == np.float32
    decoded = codec.decode(packed)
    for k, transition in enumerate(transitions):
        for got, expected in zip(tree.flatten(decoded), tree.flatten(transition)):
            assert got[k].dtype == np.asarray(expected).dtype and np.array_equal(got[k], expected)
    # Pixels (too many values) and int64 leaves keep one column per leaf.
    pixels = spec.__class__(specs.Array((84, 84, 4), np.uint8), spec.actions, spec.rewards, spec.discounts)
    wide = spec.__class__(specs.Array((3,), np.int64), spec.actions, spec.rewards, spec.discounts)
    assert type(transition_codec(pixels)) is ColumnCodec and type(transition_codec(wide)) is ColumnCodec


def test_packed_items_round_trip_through_a_table_and_the_learners_iterator():
    from rl.replay.adders import transition_codec
    from rl.replay.server import make_replay_iterator, make_sequence_table

    codec = transition_codec(SPEC)
    table = make_sequence_table("packed", codec.signature(), 1000, reverb.rate_limiters.MinSize(1), None)
    server = reverb.Server([table], port=None)
    try:
        client = reverb.Client(f"localhost:{server.port}")
        adder = NStepTransitionAdder(client, "packed", n_step=1, discount=GAMMA, codec=codec)
        _write_episode(adder, [1.0, 2.0, 3.0, 4.0], last_discount=0.0)
        adder.reset()
        iterator = make_replay_iterator(client.server_address, "packed", 16, decode=codec.decode)
        batch = next(iterator).data
        iterator.close()
    finally:
        server.stop()
    observation = np.asarray(batch.observation)[:, 0]
    assert batch.action.dtype == np.int32 and np.array_equal(np.asarray(batch.action), observation.astype(np.int32) % 3)
    assert np.array_equal(np.asarray(batch.next_observation)[:, 0], observation + 1)
    assert np.array_equal(np.asarray(batch.reward), observation + 1)  # Reward t + 1 at step t (n = 1).


def test_the_learners_batches_stay_whole_across_sampler_wakes_and_a_closed_iterators_thread_leaves():
    """A sampler the rate limiter holds `SAMPLER_WAKE_MS` ends its dataset (a partial last batch) and a
    new one starts: the partial batch joins the next, nothing is lost or reordered, and a closed
    iterator's thread leaves while the server is up (after `server.stop()` reverb's sampler spins)."""
    import time

    import tensorflow as tf

    from rl.replay.server import SAMPLER_WAKE_MS, make_queue_table, make_replay_iterator

    server = reverb.Server([make_queue_table("q", 100, {"x": tf.TensorSpec([], tf.int64)})], port=None)
    try:
        client = reverb.Client(f"localhost:{server.port}")

        def insert(values):
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                for value in values:
                    writer.append({"x": np.int64(value)})
                    writer.create_item("q", 1.0, {"x": writer.history["x"][-1]})

        iterator = make_replay_iterator(client.server_address, "q", 8, timeout_s=10)  # A lost item: an error.
        insert(range(13))  # One batch and 5 items: the sampler waits for 3 more, then its dataset ends.
        time.sleep(3 * SAMPLER_WAKE_MS / 1000)
        insert(range(13, 24))
        batches = [np.asarray(next(iterator).data["x"]) for _ in range(3)]
        iterator.close()
        assert not iterator._thread.is_alive()
    finally:
        server.stop()
    assert [batch.tolist() for batch in batches] == [list(range(k, k + 8)) for k in (0, 8, 16)]
