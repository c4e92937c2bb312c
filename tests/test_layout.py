"""The core layout, one piece at a time: how nodes are built, keyed, seeded and counted,
how actors log and refresh parameters, and what the DQN learner does to its target
network and to replay priorities.

Real parts throughout: gymnasium CartPole, in-process reverb servers, tiny haiku networks.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
import reverb

from rl import core
from rl.agents.dqn import DQNConfig
from rl.agents.dqn.builder import DQNBuilder, double_q_loss
from rl.systems.learning import SGDLearner
from rl.counting import Counter
from rl.environments.factories import make_gymnasium_environment
from rl.environment_loop import EnvironmentLoop
from rl.experiments.builders import build_actor, build_evaluator, build_learner, environment_seed
from rl.experiments.config import Experiment
from rl.experiments.builders import NodeBuilder, Evaluations
from rl.loggers.base import Logger, NoOpLogger
from rl.networks import make_q_network
from rl.policies import EpsilonGreedy
from rl.replay.server import make_dataset, make_replay_iterator, make_sequence_table
from rl.replay.adders import transition_codec
from rl.core import VariableClient

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

TABLE = "priority_table"


class SeedRecorder:
    """CartPole environments, remembering the seed each was made with."""

    def __init__(self):
        self.seeds: list[int] = []

    def __call__(self, seed):
        self.seeds.append(seed)
        return make_gymnasium_environment("CartPole-v1", seed=seed)


class Rows(Logger):
    def __init__(self):
        self.rows: list[dict] = []

    def write(self, data):
        self.rows.append(dict(data))


class RowsFactory:
    """A logger factory keeping every logger it made, by (label, steps_key, instance)."""

    def __init__(self):
        self.loggers: dict[tuple, Rows] = {}

    def __call__(self, label, steps_key=None, instance=None):
        return self.loggers.setdefault((label, steps_key, instance), Rows())


class FixedParams(core.VariableSource):
    """Serves one set of parameters and counts the requests."""

    def __init__(self, params):
        self.params = params
        self.calls = 0

    def get_variables(self, names):
        self.calls += 1
        return [self.params for _ in names]


def make_experiment(seed=0, exploration=None, **agent):
    settings = dict(batch_size=8, min_replay_size=1, max_replay_size=1000, samples_per_insert=8.0, n_step=1)
    settings.update(agent)
    environments = SeedRecorder()
    experiment = Experiment(
        builder=DQNBuilder(DQNConfig(**settings), exploration or EpsilonGreedy(1.0, 1.0)),
        environment_factory=environments,
        network_factory=functools.partial(make_q_network, hidden_sizes=(8,)),
        logger_factory=RowsFactory(),
        seed=seed,
        max_actor_steps=1000,
    )
    _ = experiment.environment_spec  # Read once here, so the recorder holds only the nodes' seeds.
    environments.seeds.clear()
    return experiment


def network_and_params(experiment, seed=1):
    network = experiment.network_factory(environment_spec=experiment.environment_spec)
    return network, network.init(jax.random.PRNGKey(seed))


def start_server(experiment, prioritized=False, priority_exponent=0.6):
    """A server whose table never rate-limits, so tests insert and sample freely."""
    table = make_sequence_table(
        TABLE,
        transition_codec(experiment.environment_spec).signature(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        priority_exponent=priority_exponent if prioritized else None,
    )
    server = reverb.Server([table], port=None)
    return server, reverb.Client(f"localhost:{server.port}")


@pytest.fixture
def experiment():
    return make_experiment()


@pytest.fixture
def replay(experiment):
    server, client = start_server(experiment)
    yield client
    server.stop()


def actions(actor, count=32):
    observation = np.zeros((1, 4), np.float32)  # A batch of one environment copy.
    return [int(actor.select_action(observation)[0]) for _ in range(count)]


def same_tree(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


# build_actor / build_evaluator: keys and seeds.


def test_environment_seeds_are_uint32_drawn_from_the_key():
    seeds = [environment_seed(jax.random.PRNGKey(i)) for i in range(16)]
    assert all(type(seed) is int and 0 <= seed < 2**32 for seed in seeds)
    assert any(seed >= 2**31 for seed in seeds)  # Unsigned: no sign bit folded in.
    assert seeds[3] == int(jax.random.bits(jax.random.PRNGKey(3), dtype=np.uint32))
    assert len(set(seeds)) == 16


def test_build_actor_seeds_the_environment_from_the_first_key_half_and_acts_with_the_second(experiment, replay):
    _, params = network_and_params(experiment)
    source = FixedParams(params)
    key = jax.random.PRNGKey(42)
    loop = build_actor(experiment, key, replay, source, Counter(), actor_id=0)
    environment_key, actor_key = jax.random.split(key)
    assert experiment.environment_factory.seeds == [environment_seed(environment_key)]
    assert loop.actor.adder is not None  # Behaviour actors write to replay.

    # epsilon = 1: every action is drawn from the actor's key, so the sequence names the key.
    builder, spec = experiment.builder, experiment.environment_spec
    networks = experiment.network_factory(environment_spec=spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    reference = {
        name: actions(builder.make_actor(k, policy, spec, source, None))
        for name, k in (("actor", actor_key), ("environment", environment_key), ("whole", key))
    }
    acted = actions(loop.actor)
    assert acted == reference["actor"]
    assert acted != reference["environment"] and acted != reference["whole"]


def test_build_evaluator_splits_its_key_the_same_way_and_acts_greedily_without_replay(experiment):
    network, params = network_and_params(experiment)
    keys_given = []

    def make_actor(key, *args):
        keys_given.append(key)
        return experiment.builder.make_actor(key, *args)

    key = jax.random.PRNGKey(7)
    evaluator = build_evaluator(experiment, key, FixedParams(params), Counter(), make_actor=make_actor)
    environment_key, actor_key = jax.random.split(key)
    # One environment copy per evaluation episode, seeded consecutively from the key's seed.
    first_seed = environment_seed(environment_key)
    assert experiment.environment_factory.seeds == [(first_seed + i) % 2**32 for i in range(experiment.eval_episodes)]
    assert len(keys_given) == 1 and np.array_equal(keys_given[0], actor_key)
    assert isinstance(evaluator, EnvironmentLoop) and evaluator.evaluation and evaluator.actor.adder is None
    assert evaluator.logger is experiment.logger_factory.loggers[("evaluator", "actor_steps", 0)]
    observations = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    greedy = np.argmax(network.apply(params, observations), axis=-1)
    assert evaluator.actor.select_action(observations).tolist() == greedy.tolist()


def test_nodes_of_a_program_get_distinct_keys_and_environment_seeds(replay):
    experiment = make_experiment(seed=3)
    program = NodeBuilder(experiment, num_actors=3, num_evaluators=2)
    keys = program.keys
    all_keys = [keys.learner, *keys.actors, *keys.evaluators]
    assert len({tuple(np.asarray(k).tolist()) for k in all_keys}) == 6
    _, params = network_and_params(experiment)
    for actor_id in range(3):
        program.make_actor(actor_id, replay, FixedParams(params), Counter())
    program.make_evaluator(1, FixedParams(params), Counter())
    expected = [environment_seed(jax.random.split(k)[0]) for k in (*keys.actors, keys.evaluators[1])]
    evaluator_copies = [(expected[-1] + i) % 2**32 for i in range(experiment.eval_episodes)]
    assert experiment.environment_factory.seeds == expected[:-1] + evaluator_copies
    assert len(set(expected)) == 4
    # The same seed gives the same keys.
    again = NodeBuilder(make_experiment(seed=3), num_actors=3, num_evaluators=2).keys
    assert all(np.array_equal(a, b) for a, b in zip(all_keys, [again.learner, *again.actors, *again.evaluators]))


# Restarted actors: a fresh key per restart, schedules resumed.


def test_a_restarted_actor_gets_a_fresh_key_derived_from_actor_id_and_restart_count():
    program = NodeBuilder(make_experiment(seed=5), num_actors=2)
    keys = {(i, r): np.asarray(program.actor_key(i, r)).tolist() for i in range(2) for r in range(4)}
    assert len({tuple(k) for k in keys.values()}) == 8  # Distinct per actor and per restart.
    assert keys[(1, 0)] == np.asarray(program.keys.actors[1]).tolist()  # A first start is unchanged.
    assert keys[(1, 2)] == np.asarray(jax.random.fold_in(program.keys.actors[1], 2)).tolist()
    again = NodeBuilder(make_experiment(seed=5), num_actors=2)
    assert all(np.asarray(again.actor_key(i, r)).tolist() == k for (i, r), k in keys.items())  # Deterministic.
    other_seed = NodeBuilder(make_experiment(seed=6), num_actors=2)
    assert np.asarray(other_seed.actor_key(1, 2)).tolist() != keys[(1, 2)]
    with pytest.raises(ValueError, match="restart"):
        program.actor_key(0, -1)


def test_a_restarted_actor_resumes_its_schedule_and_reseeds_its_environment(replay):
    # Epsilon anneals from 1 to 0 over 50 steps: from step 50 on the actor is greedy.
    exploration = EpsilonGreedy(epsilon_start=1.0, epsilon_end=0.0, decay_fraction=0.5, run_steps=100)
    experiment = make_experiment(seed=2, exploration=exploration)
    program = NodeBuilder(experiment, num_actors=2)
    network, params = network_and_params(experiment)
    first = program.make_actor(1, replay, FixedParams(params), Counter())
    restarted = program.make_actor(1, replay, FixedParams(params), Counter(), restart=1, initial_step=50)
    assert first.actor.step_count == 0 and restarted.actor.step_count == 50
    assert experiment.environment_factory.seeds == [
        environment_seed(jax.random.split(program.actor_key(1, r))[0]) for r in (0, 1)
    ]
    assert experiment.environment_factory.seeds[0] != experiment.environment_factory.seeds[1]
    observations = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    greedy = np.argmax(network.apply(params, observations), axis=-1).tolist()
    assert restarted.actor.select_action(observations).tolist() == greedy
    # Schedules count environment steps (observed), not policy calls.
    restarted.run_steps(14)
    assert restarted.actor.step_count == 64
    # Started from 0 instead, the first actions are random: not all greedy.
    assert first.actor.select_action(observations[:16]).tolist() != greedy[:16]


# Counters: prefixes, and children adding up in the parent.


def test_nodes_count_under_their_prefix_into_one_root(experiment):
    server, client = start_server(experiment)
    try:
        root = Counter()
        _, params = network_and_params(experiment)
        loop = build_actor(experiment, jax.random.PRNGKey(0), client, FixedParams(params), root, actor_id=0)
        records = loop.run_episodes(2)
        steps = sum(r["episode_length"] for r in records)
        assert root.get_counts() == {"actor_steps": steps, "actor_episodes": 2}
        assert records[-1]["actor_steps"] == steps and records[-1]["actor_episodes"] == 2
        assert loop.counter.save() == {"steps": steps, "episodes": 2}

        evaluator = build_evaluator(experiment, jax.random.PRNGKey(1), FixedParams(params), root)
        history = Evaluations()
        mean_return = history.evaluate(evaluator, 3)
        counts = root.get_counts()
        assert counts["evaluator_episodes"] == 3 and counts["actor_steps"] == steps
        assert evaluator.counter.save() == {"steps": counts["evaluator_steps"], "episodes": 3}
        assert history.returns == [(steps, mean_return)]  # Evaluations sit on the actors' x-axis.

        opened = []  # The learner's replay iterator, closed while the server is up.
        learner = build_learner(
            experiment, jax.random.PRNGKey(2), client, root, wrap_dataset=lambda it: opened.append(it) or it
        )
        learner.step()
        learner.step()
        opened[0].close()
        assert root.get_counts() == {**counts, "learner_steps": 2}
        (learner_rows,) = [
            logger.rows
            for key, logger in experiment.logger_factory.loggers.items()
            if key[:2] == ("learner", "learner_steps")
        ]
        assert learner_rows[0]["learner_steps"] == 1 and learner_rows[0]["actor_steps"] == steps
    finally:
        server.stop()


# Logging by Acme's rule: only actor 0 writes episode records; every actor counts.


def test_only_actor_0_writes_episode_records_and_every_actor_counts(experiment, replay):
    _, params = network_and_params(experiment)
    factory = experiment.logger_factory
    root = Counter()
    loops = [
        build_actor(experiment, jax.random.PRNGKey(i), replay, FixedParams(params), root, actor_id=i) for i in range(3)
    ]
    records = loops[0].run_episodes(3)
    assert factory.loggers[("actor", "actor_steps", 0)].rows == records
    assert loops[0].logger is factory.loggers[("actor", "actor_steps", 0)]
    others = [loops[i].run_episodes(2) for i in (1, 2)]
    assert all(type(loops[i].logger) is NoOpLogger for i in (1, 2))
    assert set(factory.loggers) == {("actor", "actor_steps", 0)}  # Nothing asked for actors 1 and 2.
    steps = sum(r["episode_length"] for r in records + others[0] + others[1])
    assert root.get_counts() == {"actor_steps": steps, "actor_episodes": 7}


# VariableClient: how often parameters are fetched.


class Versions(core.VariableSource):
    """Serves version 1, 2, 3, ... on successive requests."""

    def __init__(self):
        self.calls = 0

    def get_variables(self, names):
        self.calls += 1
        return [self.calls for _ in names]


def test_variable_client_fetches_every_update_period_calls():
    source = Versions()
    client = VariableClient(source, update_period=3)
    assert client.params == 1 and source.calls == 1  # The first read waits for parameters.
    seen = []
    for _ in range(7):
        client.update()
        seen.append(client.params)
    assert seen == [1, 1, 2, 2, 2, 3, 3] and source.calls == 3
    client.update(wait=True)  # Fetches now, and restarts the period.
    assert client.params == 4
    for _ in range(2):
        client.update()
    assert client.params == 4 and source.calls == 4
    client.update()
    assert client.params == 5


def test_variable_update_period_reaches_the_actor(replay):
    experiment = make_experiment(variable_update_period=4)
    _, params = network_and_params(experiment)
    source = FixedParams(params)
    loop = build_actor(experiment, jax.random.PRNGKey(0), replay, source, Counter(), actor_id=0)
    for _ in range(9):
        loop.step()
    assert source.calls == 1 + 2  # The first action's read, then steps 4 and 8.


# The DQN learner: target copies and priority updates.


def fill(experiment, client, steps):
    _, params = network_and_params(experiment)
    loop = build_actor(experiment, jax.random.PRNGKey(9), client, FixedParams(params), Counter(), actor_id=0)
    for _ in range(steps):
        loop.step()
    loop.actor.adder.reset()


class Recorded:
    """Passes batches through, keeping them."""

    def __init__(self, iterator):
        self._iterator = iterator
        self.samples = []

    def __iter__(self):
        return self

    def __next__(self):
        sample = next(self._iterator)
        self.samples.append(sample)
        return sample


def make_learner(experiment, client, **overrides):
    config = experiment.builder.config
    for name, value in overrides.items():
        setattr(config, name, value)
    network, _ = network_and_params(experiment)
    batch = config.batch_size * config.sgd_steps_per_learner_step
    decode = transition_codec(experiment.environment_spec).decode  # The table's layout.
    iterator = Recorded(make_replay_iterator(client.server_address, TABLE, batch, decode=decode))
    learner = SGDLearner(DQNBuilder(config).make_learning(network), jax.random.PRNGKey(3), iterator, client)
    return network, learner, iterator


@pytest.mark.parametrize("sgd_steps_per_learner_step,target_update_period", [(1, 3), (2, 4)])
def test_target_params_are_copied_exactly_every_target_update_period_sgd_steps(
    experiment, replay, sgd_steps_per_learner_step, target_update_period
):
    fill(experiment, replay, 64)
    _, learner, iterator = make_learner(
        experiment,
        replay,
        sgd_steps_per_learner_step=sgd_steps_per_learner_step,
        target_update_period=target_update_period,
    )
    try:
        initial = learner.save()
        assert same_tree(initial.target_params, initial.params)
        last_copy = initial.params
        for learner_step in range(1, 7):
            previous = learner.save()
            learner.step()
            state = learner.save()
            sgd_steps = learner_step * sgd_steps_per_learner_step
            assert int(state.steps) == sgd_steps
            assert not same_tree(state.params, previous.params)
            if sgd_steps % target_update_period == 0:
                assert same_tree(state.target_params, state.params), sgd_steps
                last_copy = state.params
            else:
                assert same_tree(state.target_params, last_copy), sgd_steps
                assert not same_tree(state.target_params, state.params), sgd_steps
    finally:
        iterator._iterator.close()


def table_priorities(client, draws=4000):
    """Every item's current priority, read by sampling (the table samples uniformly)."""
    dataset = make_dataset(client.server_address, TABLE, batch_size=100)
    priorities = {}
    for sample in dataset.take(draws // 100).as_numpy_iterator():
        priorities.update(zip(sample.info.key.tolist(), sample.info.priority.tolist()))
    return priorities


def test_prioritized_learner_sets_sampled_priorities_to_their_td_errors():
    # priority_exponent 0: prioritized sampling that is uniform, so every item's priority
    # can be read back by sampling.
    experiment = make_experiment(prioritized=True, priority_exponent=0.0)
    server, client = start_server(experiment, prioritized=True, priority_exponent=0.0)
    try:
        fill(experiment, client, 24)
        before = table_priorities(client)
        assert len(before) == 24 and set(before.values()) == {1.0}  # The adder's initial priority.
        network, learner, iterator = make_learner(experiment, client)
        state = learner.save()
        learner.step()
        (sample,) = iterator.samples
        _, extras = double_q_loss(
            state.params, state.target_params, network.apply, sample.data, np.ones(8, np.float32), 1.0
        )
        expected = dict(zip(sample.keys.tolist(), (np.asarray(extras["abs_td_error"], np.float64) + 1e-6).tolist()))
        after = table_priorities(client)
        assert set(after) == set(before)
        for key, priority in after.items():
            if key in expected:
                assert priority == pytest.approx(expected[key], rel=1e-5, abs=1e-7)
            else:
                assert priority == 1.0
        assert len(expected) >= 2 and any(abs(p - 1.0) > 1e-3 for p in expected.values())
        iterator._iterator.close()
    finally:
        server.stop()


def test_uniform_learner_leaves_priorities_alone(experiment, replay):
    fill(experiment, replay, 24)
    _, learner, iterator = make_learner(experiment, replay)
    try:
        learner.step()
        learner.step()
        assert set(table_priorities(replay).values()) == {1.0}
    finally:
        iterator._iterator.close()
