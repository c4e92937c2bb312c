"""Vectorised actors: N environment copies, one batched policy call, one stream per copy."""

from __future__ import annotations

import functools
import time

import dm_env
import jax
import numpy as np
import pytest
import reverb
from dm_env import specs

from rl import core
from rl.agents.dqn import DQNConfig
from rl.agents.dqn.builder import DQNBuilder
from rl.counting import Counter
from rl.environment_loop import EnvironmentLoop
from rl.environments.vector import VectorEnvironment, vector_seeds
from rl.experiments.builders import build_actor, environment_seed
from rl.experiments.config import Experiment
from rl.loggers.base import Logger
from rl.networks import make_q_network
from rl.policies import EpsilonGreedy
from rl.replay.adders import transition_codec

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

N_STEP = 2


class Counting(dm_env.Environment):
    """Observations say which environment, episode and step they come from:
    [seed, episode, t]. Episode lengths and rewards depend only on the seed."""

    def __init__(self, seed: int):
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._episode = -1
        self._t = 0
        self._length = 0

    def _observation(self):
        return np.array([self.seed % 1000, self._episode, self._t], np.float32)

    def reset(self):
        self._episode += 1
        self._t = 0
        self._length = int(self._rng.integers(2, 9))
        return dm_env.restart(self._observation())

    def step(self, action):
        self._t += 1
        reward = np.float32(self.seed % 7 + self._t)
        if self._t == self._length:
            return dm_env.termination(reward, self._observation())
        return dm_env.transition(reward, self._observation())

    def observation_spec(self):
        return specs.Array((3,), np.float32, "observation")

    def action_spec(self):
        return specs.DiscreteArray(2, name="action")


class Params(core.VariableSource):
    def __init__(self, params):
        self.params = params

    def get_variables(self, names):
        return [self.params for _ in names]


class Rows(Logger):
    def __init__(self):
        self.rows = []

    def write(self, data):
        self.rows.append(dict(data))


def make_experiment(num_envs: int) -> Experiment:
    config = DQNConfig(batch_size=4, min_replay_size=1, n_step=N_STEP, discount=0.5)
    return Experiment(
        builder=DQNBuilder(config, EpsilonGreedy(1.0, 1.0)),
        environment_factory=lambda seed: Counting(seed),
        network_factory=functools.partial(make_q_network, hidden_sizes=(8,)),
        logger_factory=lambda *args, **kwargs: Rows(),
        num_envs=num_envs,
    )


@pytest.fixture
def replay():
    experiment = make_experiment(1)
    codec = transition_codec(experiment.environment_spec)  # The layout the actor's adder writes.
    table = reverb.Table.queue(experiment.builder.config.replay_table_name, 10_000, signature=codec.signature())
    server = reverb.Server([table], port=None)
    yield reverb.Client(f"localhost:{server.port}")
    server.stop()


def actor_loop(experiment, client, key):
    network = experiment.network_factory(environment_spec=experiment.environment_spec)
    params = Params(network.init(jax.random.PRNGKey(0)))
    return build_actor(experiment, key, client, params, Counter(), actor_id=0)


def read_all(client, table, count, environment_spec):
    """`count` items off a queue once the writer's items are there; the sampler gives up on an empty
    queue after 100 ms (a blocked sampler takes 3 s to cancel when the dataset ends)."""
    deadline = time.monotonic() + 30
    while client.server_info()[table].current_size < count and time.monotonic() < deadline:
        time.sleep(0.01)
    dataset = reverb.TrajectoryDataset.from_table_signature(
        client.server_address, table, max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=100
    )
    decode = transition_codec(environment_spec).decode
    return [decode(sample.data) for sample in dataset.take(count).as_numpy_iterator()]


def test_copies_are_seeded_like_single_environments():
    assert vector_seeds(7, 3) == [7, 8, 9]
    assert vector_seeds(2**32 - 1, 2) == [2**32 - 1, 0]  # uint32 wrap-around.
    vector = VectorEnvironment.make(Counting, seed=40, num_envs=3)
    assert [environment.seed for environment in vector.environments] == [40, 41, 42]


def test_every_item_holds_one_copys_consecutive_steps(replay):
    experiment = make_experiment(4)
    loop = actor_loop(experiment, replay, jax.random.PRNGKey(3))
    assert loop.num_envs == 4
    loop.run_steps(203)  # Not a multiple of 4: the last call steps 3 copies.
    assert loop.actor.step_count == 203
    loop.actor.adder.reset()
    items = read_all(
        replay, experiment.builder.config.replay_table_name, loop.actor.adder.num_items, experiment.environment_spec
    )
    assert 203 - 4 * (N_STEP - 1) <= len(items) <= 203  # Unfinished episodes keep <= n-1 steps back.
    copies = set()
    for item in items:
        (seed, episode, t), (next_seed, next_episode, next_t) = item.observation, item.next_observation
        copies.add(seed)
        assert (next_seed, next_episode) == (seed, episode)  # One copy, one episode.
        assert 1 <= next_t - t <= N_STEP  # Consecutive steps of that copy.
        assert (next_t - t == N_STEP) or item.discount == 0.0  # Shorter only at the episode's end.
    first_seed = environment_seed(jax.random.split(jax.random.PRNGKey(3))[0])
    assert copies == {s % 1000 for s in vector_seeds(first_seed, 4)}


def test_episode_returns_per_copy_match_single_environment_runs():
    vector = EnvironmentLoop(VectorEnvironment.make(Counting, seed=11, num_envs=4), RandomActor(2))
    by_copy = {}
    for _ in range(60):
        records = vector.step()
        for env_id, record in zip(vector.ended_ids, records):
            by_copy.setdefault(env_id, []).append(record["episode_return"])
    assert sorted(by_copy) == [0, 1, 2, 3]
    for env_id, returns in by_copy.items():
        single = EnvironmentLoop(Counting(11 + env_id), RandomActor(2))
        alone = single.run_episodes(len(returns))
        assert [record["episode_return"] for record in alone] == returns


def test_evaluation_rounds_play_exactly_the_episodes_asked_for():
    loop = EnvironmentLoop(VectorEnvironment.make(Counting, seed=5, num_envs=3), RandomActor(2))
    records = loop.run_episodes(7)  # 3 copies: some copies play a second or third episode.
    assert len(records) == 7
    assert loop.counter.get_counts()["episodes"] == 7
    assert loop.counter.get_counts()["steps"] == sum(r["episode_length"] for r in records)
    # Which episodes: copies restart as they finish until 7 have started. Replay that
    # schedule from each copy's episodes played alone.
    alone = {i: EnvironmentLoop(Counting(5 + i), RandomActor(2)).run_episodes(7) for i in range(3)}
    ends = {i: np.cumsum([r["episode_length"] for r in alone[i]]).tolist() for i in range(3)}
    played, started, events = [], 3, sorted((ends[i][0], i, 0) for i in range(3))
    while events:
        _, i, j = events.pop(0)
        played.append(alone[i][j]["episode_return"])
        if started < 7:
            started += 1
            events = sorted(events + [(ends[i][j + 1], i, j + 1)])
    assert [r["episode_return"] for r in records] == played


class RandomActor(core.Actor):
    """Uniform random actions for a batch of observations (no learning)."""

    def __init__(self, num_actions):
        self._rng = np.random.default_rng(0)
        self._num_actions = num_actions

    def select_action(self, observations):
        return self._rng.integers(0, self._num_actions, len(observations)).astype(np.int32)

    def observe_first(self, timestep, env_ids=None):
        pass

    def observe(self, actions, next_timestep, env_ids=None):
        pass

    def update(self, wait=False):
        pass


def test_a_new_adder_after_dropped_episodes_gets_only_whole_episodes_from_their_start(replay):
    """What an actor does when its replay connection is rebuilt (a replay node that came
    back): the episodes in flight are dropped, counted, and the new adder's items all
    start in episodes that began after the switch."""
    experiment = make_experiment(2)
    loop = actor_loop(experiment, replay, jax.random.PRNGKey(5))
    loop.run_steps(7)
    assert loop.steps_taken == 7
    old = loop.actor.adder
    old.reset()
    before = {
        (int(item.observation[0]), int(item.observation[1]))
        for item in read_all(
            replay, experiment.builder.config.replay_table_name, old.num_items, experiment.environment_spec
        )
    }
    episodes_before = {seed: max(e for s, e in before if s == seed) for seed, _ in before}
    loop.actor.adder = experiment.builder.make_adder(replay, experiment.environment_spec)
    loop.drop_episodes()
    assert loop.counter.get_counts()["actor_steps"] == 7  # The dropped episodes' steps are counted.
    loop.run_steps(40)
    loop.actor.adder.reset()
    items = read_all(
        replay, experiment.builder.config.replay_table_name, loop.actor.adder.num_items, experiment.environment_spec
    )
    assert items and loop.steps_taken == 47
    for item in items:
        seed, episode = int(item.observation[0]), int(item.observation[1])
        assert episode > episodes_before.get(seed, -1)  # Only episodes begun after the switch.
