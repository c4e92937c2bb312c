"""Schedules follow the run's length: no learning rate or epsilon ends before the budget."""

import os

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT
from rl.agents.dqn import DQNConfig
from rl.agents.dqn.builder import learning_rate_schedule
from rl.experiments.make_experiment import make_experiment
from rl.policies import EpsilonGreedy

CONF = os.path.join(ROOT, "conf")
LONG_RUN = ["agent=dqn", "environment=gymnasium", "environment.name=MountainCar-v0", "max_actor_steps=200000"]


def compose_experiment(overrides, tmp_path):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    experiment, _ = make_experiment(config, str(tmp_path))
    return experiment


def test_dqn_learning_rate_spans_a_long_run(tmp_path):
    builder = compose_experiment(LONG_RUN, tmp_path).builder
    config = builder.config
    schedule = learning_rate_schedule(config)
    # 200k actor steps, sampling from 1,000 items, 64 samples per insert, batch 128:
    # (200_000 - 1_000) * 64 / 128 = 99_500 SGD steps over the whole run.
    assert config.sgd_steps_by(200_000) == 99_500
    quarter_left = config.sgd_steps_by(150_000)  # 74_500 SGD steps
    assert float(schedule(quarter_left)) == pytest.approx(config.learning_rate * 25_000 / 99_500, rel=1e-4)
    assert float(schedule(99_500)) == 0.0
    assert float(schedule(99_499)) > 0.0


def test_epsilon_decay_follows_the_budget(tmp_path):
    policy = compose_experiment(LONG_RUN, tmp_path).builder.exploration
    assert policy.decay_steps == 40_000  # decay_fraction 0.2 of 200k
    np.testing.assert_allclose(
        [float(policy.epsilon(s)) for s in (0, 20_000, 40_000, 150_000)], [1.0, 0.525, 0.05, 0.05], rtol=1e-6
    )


def test_each_ray_actor_reaches_the_epsilon_floor_at_decay_fraction_of_the_run(tmp_path):
    """4 actors share the 200k steps: each counts its own ~50k, so its schedule ends
    after 0.2 * 200k / 4 = 10k of them, when the run as a whole is at 0.2 of its
    budget. (No Ray is started: only the experiment is built.)"""
    policy = compose_experiment([*LONG_RUN, "launcher=ray", "launcher.num_actors=4"], tmp_path).builder.exploration
    assert policy.decay_steps == 10_000
    assert float(policy.epsilon(9_999)) > 0.05
    np.testing.assert_allclose([float(policy.epsilon(s)) for s in (0, 5_000, 10_000, 50_000)], [1.0, 0.525, 0.05, 0.05])


def test_the_epsilon_schedule_of_one_actor_spans_its_whole_budget():
    """One actor (launcher=local, or ray with num_actors=1) keeps the whole run."""
    assert EpsilonGreedy(decay_fraction=0.2, run_steps=200_000).decay_steps == 40_000
    assert EpsilonGreedy(decay_fraction=0.2, run_steps=200_000, num_actors=1).decay_steps == 40_000
    assert EpsilonGreedy(decay_fraction=0.2, run_steps=200_000, num_actors=4).decay_steps == 10_000


def test_constant_learning_rate_when_decay_is_off():
    config = DQNConfig(learning_rate=3e-4, learning_rate_decay_actor_steps=0)
    assert learning_rate_schedule(config) == 3e-4


def test_cosine_learning_rate_decay_follows_the_half_cosine():
    # 50k actor steps from 1,000 items at 32 samples per insert, batch 64: 24,500 SGD steps.
    config = DQNConfig(
        learning_rate=1e-3,
        learning_rate_decay_actor_steps=50_000,
        learning_rate_decay="cosine",
        final_learning_rate_fraction=0.1,
        batch_size=64,
        samples_per_insert=32.0,
        min_replay_size=1_000,
    )
    schedule = learning_rate_schedule(config)
    steps = config.sgd_steps_by(50_000)
    assert steps == 24_500
    for fraction in (0.0, 0.25, 0.5, 0.85, 1.0):
        expected = 1e-3 * (0.1 + 0.9 * (1 + np.cos(np.pi * fraction)) / 2)
        assert float(schedule(round(steps * fraction))) == pytest.approx(expected, rel=1e-4)
    assert float(schedule(2 * steps)) == pytest.approx(1e-4, rel=1e-4)  # Stays at the floor.


def test_unknown_learning_rate_decay_is_a_clear_error():
    with pytest.raises(ValueError, match="learning_rate_decay must be one of linear, cosine, got 'exp'"):
        DQNConfig(learning_rate_decay="exp")
