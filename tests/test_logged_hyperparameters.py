"""Every agent logs the learning rate it trains with (the schedule's value at the SGD step,
computed inside the jitted update), and an exploring actor's episode records carry the
exploration it acts with (epsilon, the noise's sigma)."""

from __future__ import annotations

import importlib
import math

import jax
import numpy as np
import optax
import pytest
from dm_env import specs

from rl.systems.learning import SGDLearner
from rl.agents.dqn.builder import learning_rate_schedule
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.replay import ReplaySample
from rl.replay.adders import SequenceStep
from rl.core import EnvironmentSpec, Transition

DISCRETE = EnvironmentSpec(
    observations=specs.Array((3,), np.float32, "observation"),
    actions=specs.DiscreteArray(2, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
CONTINUOUS = EnvironmentSpec(
    observations=specs.Array((3,), np.float32, "observation"),
    actions=specs.BoundedArray((1,), np.float32, -2.0, 2.0, "action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)


class Recorder(Logger):
    """Keeps every record written to it."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, data) -> None:
        self.records.append(dict(data))


def _samples(make_data):
    """Replay samples of `make_data(rng)`, uniform (probabilities 1, table size 1)."""
    rng = np.random.default_rng(0)
    while True:
        data = make_data(rng)
        batch = jax.tree_util.tree_leaves(data)[0].shape[0]
        yield ReplaySample(np.arange(batch), np.ones(batch, np.float32), np.ones((), np.int32), data)


def _transitions(spec: EnvironmentSpec, batch: int):
    def make(rng):
        if isinstance(spec.actions, specs.DiscreteArray):
            action = rng.integers(0, spec.actions.num_values, batch).astype(np.int32)
        else:
            action = rng.uniform(-2.0, 2.0, (batch, 1)).astype(np.float32)
        return Transition(
            observation=rng.normal(size=(batch, 3)).astype(np.float32),
            action=action,
            reward=rng.normal(size=batch).astype(np.float32),
            discount=np.full(batch, 0.99, np.float32),
            next_observation=rng.normal(size=(batch, 3)).astype(np.float32),
        )

    return _samples(make)


def _schedule_counts(opt_state) -> list[int]:
    """The counts optax's learning-rate schedules read from (one per scheduled optimiser)."""
    leaves = jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState))
    return [int(leaf.count) for leaf in leaves if isinstance(leaf, optax.ScaleByScheduleState)]


# --------------------------------------------------------------------------- learning rates


def test_dqn_logs_the_scheduled_learning_rate_of_each_sgd_step():
    from rl.agents.dqn import DQNConfig
    from rl.agents.dqn.builder import DQNBuilder
    from rl.networks import make_q_network

    # 10 SGD steps of decay (20 actor steps past min_replay_size 4, 2 samples per insert, batch 4).
    config = DQNConfig(
        batch_size=4,
        samples_per_insert=2.0,
        min_replay_size=4,
        learning_rate=1e-3,
        learning_rate_decay_actor_steps=24,
        final_learning_rate_fraction=0.1,
        prioritized=False,
    )
    schedule = learning_rate_schedule(config)
    assert config.sgd_steps_by(24) == 10
    logger = Recorder()
    learner = SGDLearner(
        DQNBuilder(config).make_learning(make_q_network(DISCRETE, (8,))),
        jax.random.PRNGKey(0),
        _transitions(DISCRETE, 4),
        counter=Counter(),
        logger=logger,
    )
    for _ in range(3):
        learner.step()
    assert [float(r["learning_rate"]) for r in logger.records] == pytest.approx([float(schedule(k)) for k in range(3)])
    assert float(logger.records[2]["learning_rate"]) < 1e-3  # Decayed, and the log shows it.
    assert _schedule_counts(learner.state.opt_state) == [int(learner.state.steps)] == [3]  # The same clock.


def test_dqn_logs_a_constant_learning_rate_too():
    from rl.agents.dqn import DQNConfig
    from rl.agents.dqn.builder import DQNBuilder
    from rl.networks import make_q_network

    config = DQNConfig(batch_size=4, learning_rate=3e-4, prioritized=False)
    logger = Recorder()
    learner = SGDLearner(
        DQNBuilder(config).make_learning(make_q_network(DISCRETE, (8,))),
        jax.random.PRNGKey(0),
        _transitions(DISCRETE, 4),
        counter=Counter(),
        logger=logger,
    )
    learner.step()
    assert float(logger.records[0]["learning_rate"]) == pytest.approx(3e-4)


def test_r2d2_logs_the_scheduled_learning_rate_of_each_sgd_step():
    from rl.agents.r2d2 import R2D2Config
    from rl.agents.r2d2.builder import R2D2Builder
    from rl.networks.recurrent import make_recurrent_q_network

    config = R2D2Config(
        burn_in_length=1,
        trace_length=3,
        sequence_period=2,
        n_step=1,
        batch_size=2,
        samples_per_insert=2.0,
        min_replay_size=1,
        core_state_size=4,
        learning_rate=1e-3,
        learning_rate_decay_actor_steps=12,
        final_learning_rate_fraction=0.0,
        learning_rate_decay="cosine",
    )
    schedule = learning_rate_schedule(config)
    network = make_recurrent_q_network(DISCRETE, torso_kwargs={"hidden_sizes": [3]}, lstm_size=4)

    def sequences(rng):
        shape = (config.batch_size, config.sequence_length)
        return SequenceStep(
            observation=rng.normal(size=(*shape, 3)).astype(np.float32),
            action=rng.integers(0, 2, shape).astype(np.int32),
            reward=rng.normal(size=shape).astype(np.float32),
            discount=np.ones(shape, np.float32),
            mask=np.ones(shape, np.float32),
            extras={
                "core_state": {"cell": np.zeros((*shape, 4), np.float32), "hidden": np.zeros((*shape, 4), np.float32)}
            },
        )

    logger = Recorder()
    learner = SGDLearner(
        R2D2Builder(config).make_learning(network),
        jax.random.PRNGKey(0),
        _samples(sequences),
        counter=Counter(),
        logger=logger,
    )
    for _ in range(3):
        learner.step()
    assert [float(r["learning_rate"]) for r in logger.records] == pytest.approx([float(schedule(k)) for k in range(3)])
    assert _schedule_counts(learner.state.opt_state) == [3]


@pytest.mark.parametrize("agent", ["sac", "td3", "d4pg"])
def test_continuous_agents_log_the_learning_rate_of_each_network(agent):
    """SAC, TD3 and D4PG train two networks (SAC a temperature too), each at its own
    constant rate: each rate is logged under its network's name."""
    from rl.agents.d4pg import D4PGConfig
    from rl.agents.sac import SACConfig
    from rl.agents.td3 import TD3Config
    from rl.networks import make_actor_critic_networks

    config_class = {"sac": SACConfig, "td3": TD3Config, "d4pg": lambda **kw: D4PGConfig(num_atoms=11, **kw)}[agent]
    builder_class = getattr(importlib.import_module(f"rl.agents.{agent}.builder"), f"{agent.upper()}Builder")
    config = config_class(batch_size=4, policy_learning_rate=2e-4, critic_learning_rate=5e-4)
    networks = make_actor_critic_networks(CONTINUOUS, (8,), (8,))
    logger = Recorder()
    learning = builder_class(config).make_learning(networks)
    learner = SGDLearner(learning, jax.random.PRNGKey(0), _transitions(CONTINUOUS, 4), counter=Counter(), logger=logger)
    learner.step()
    (record,) = logger.records
    assert float(record["policy_learning_rate"]) == pytest.approx(2e-4)
    assert float(record["critic_learning_rate"]) == pytest.approx(5e-4)
    if agent == "sac":
        assert float(record["temperature_learning_rate"]) == pytest.approx(config.temperature_learning_rate)


def test_impala_logs_the_decayed_learning_rate():
    from rl.agents.impala import IMPALAConfig
    from rl.agents.impala.builder import IMPALABuilder
    from rl.networks.base import make_policy_value_network

    config = IMPALAConfig(unroll_length=4, batch_size=1, decay_actor_steps=8, final_learning_rate_fraction=0.0)
    mask = np.ones((1, 5), np.float32)
    batch = SequenceStep(
        observation=np.random.default_rng(0).normal(size=(1, 5, 3)).astype(np.float32),
        action=np.zeros((1, 5), np.int32),
        reward=mask.copy(),
        discount=mask.copy(),
        mask=mask,
        extras={"log_prob": np.full((1, 5), math.log(0.5), np.float32)},
    )
    logger = Recorder()
    network = make_policy_value_network(DISCRETE, (8,), (8,))
    samples = iter([ReplaySample(np.arange(1), np.ones(1, np.float32), np.zeros(1, np.int32), batch)] * 2)
    learner = SGDLearner(
        IMPALABuilder(config).make_learning(network), jax.random.PRNGKey(0), samples, counter=Counter(), logger=logger
    )
    learner.step()
    learner.step()
    # 4 actor steps trained on per step: the rate at 0 and 4 of the 8 decay steps.
    assert [float(r["learning_rate"]) for r in logger.records] == pytest.approx(
        [config.learning_rate, config.learning_rate / 2]
    )


# --------------------------------------------------------------------------- exploration


class FixedSource:
    """A variable source serving fixed parameters."""

    def __init__(self, params) -> None:
        self._params = params

    def get_variables(self, names):
        return [self._params for _ in names]


def _run_actor(builder, network, evaluation: bool = False, steps: int = 300) -> list[dict]:
    """The episode records of `steps` CartPole steps acting with the builder's policy."""
    from rl.environment_loop import EnvironmentLoop
    from rl.environments import make_gymnasium_environment

    environment = make_gymnasium_environment("CartPole-v1", 0)
    spec = _cartpole_spec()
    policy = builder.make_policy(network, spec, evaluation=evaluation)
    actor = builder.make_actor(jax.random.PRNGKey(1), policy, spec, FixedSource(network.init(jax.random.PRNGKey(0))))
    logger = Recorder()
    EnvironmentLoop(environment, actor, Counter(), logger).run_steps(steps)
    return logger.records


def _cartpole_spec() -> EnvironmentSpec:
    from rl.environments import make_gymnasium_environment
    from rl.core import make_environment_spec

    return make_environment_spec(make_gymnasium_environment("CartPole-v1", 0))


def test_an_epsilon_greedy_actor_logs_the_epsilon_it_acts_with():
    from rl.agents.dqn import DQNConfig
    from rl.agents.dqn.builder import DQNBuilder
    from rl.networks import make_q_network
    from rl.policies import EpsilonGreedy

    head = EpsilonGreedy(epsilon_start=1.0, epsilon_end=0.1, decay_fraction=0.5, run_steps=400)
    builder = DQNBuilder(DQNConfig(variable_update_period=1), exploration=head)
    network = make_q_network(_cartpole_spec(), (8,))
    records = _run_actor(builder, network)
    assert len(records) > 3
    for record in records:
        # The actor's step count at the episode's end: every step counted, one actor.
        assert record["epsilon"] == pytest.approx(float(head.epsilon(record["steps"])), rel=1e-6)
    # Down to the floor, not below it (at the floor, 1 + (0.1 - 1) * 1 in float64 is 0.1 less 2e-17).
    assert records[0]["epsilon"] > records[-1]["epsilon"] >= 0.1 - 1e-12
    # The greedy evaluation policy explores with nothing, and says so by omission.
    greedy = _run_actor(builder, network, evaluation=True, steps=600)  # CartPole ends by step 500.
    assert greedy and not any("epsilon" in record for record in greedy)


def test_epsilon_on_the_host_follows_the_jitted_schedule():
    from rl.policies import EpsilonGreedy

    head = EpsilonGreedy(epsilon_start=0.9, epsilon_end=0.05, decay_fraction=0.3, run_steps=1000)
    for step in (0, 1, 150, 299, 300, 301, 5000):
        assert head.exploration_metrics(step)["epsilon"] == pytest.approx(float(jax.jit(head.epsilon)(step)), rel=1e-6)


def test_gaussian_noise_and_ape_x_policies_name_their_exploration():
    """The continuous builders' noisy policy names its sigma, R2D2's per-actor policies
    their fixed epsilon; evaluation policies name nothing."""
    from rl.agents.r2d2 import R2D2Config
    from rl.agents.r2d2.builder import R2D2Builder
    from rl.agents.td3 import make_builder as make_td3
    from rl.networks import make_actor_critic_networks
    from rl.networks.recurrent import make_recurrent_q_network
    from rl.policies import GaussianNoise

    td3 = make_td3(exploration=GaussianNoise(sigma=0.3), batch_size=4)
    networks = make_actor_critic_networks(CONTINUOUS, (8,), (8,))
    assert td3.make_policy(networks, CONTINUOUS, evaluation=False).exploration(10) == {"sigma": 0.3}
    assert td3.make_policy(networks, CONTINUOUS, evaluation=True).exploration(10) == {}

    r2d2 = R2D2Builder(R2D2Config(num_actors=3, core_state_size=4))
    network = make_recurrent_q_network(DISCRETE, torso_kwargs={"hidden_sizes": [3]}, lstm_size=4)
    epsilon = r2d2.make_actor_policy(network, DISCRETE, 1).exploration(123)["epsilon"]
    assert epsilon == pytest.approx(0.4 ** (1 + 7.0 / 2))
    assert r2d2.make_policy(network, DISCRETE, evaluation=True).exploration(123) == {}
