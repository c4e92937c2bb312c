"""The compiled on-policy system's batches: several rollouts per update, observations normalised by the
learner's statistics, rewards scaled for the learner only (Brax's PPO settings, docs/anakin.md)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, short_compiled_run
from rl.agents.normalisation import normalize_observations
from rl.anakin.build import make_system
from rl.core import Batch, Transition
from rl.environments.gymnax_vector import EnvStep
from rl.experiments.make_experiment import make_experiment
from rl.systems.base import Trajectory
from rl.systems.on_policy import side_by_side, to_sequences

# 4 copies x 16 steps a rollout, two rollouts an update (batch_size 8), 2 epochs of 2 minibatches.
TWO_ROLLOUTS = [
    "experiment=ppo_gymnax_cartpole",
    "agent.unroll_length=16",
    "agent.batch_size=8",
    "agent.num_epochs=2",
    "agent.num_minibatches=2",
    "max_actor_steps=1024",
    "eval_every=512",
    "eval_episodes=2",
    "logger=csv",
    "progress=false",
    "checkpoint.enabled=false",
]


def compose_experiment(overrides: list[str], run_dir: str):
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    return make_experiment(config, run_dir, {"agent": "ppo"})


def test_consecutive_rollouts_become_sequences_side_by_side():
    """Rollout r of copy n is sequence r * N + n; each ends on the observation the next rollout starts from,
    the last on the copies' current observation."""
    rollouts, length, copies = 3, 2, 2
    # Observation = 10 * time + copy, over R * T = 6 steps.
    observation = jnp.arange(rollouts * length)[:, None] * 10 + jnp.arange(copies)[None, :]
    zeros = jnp.zeros((rollouts * length, copies))
    step = EnvStep(*[zeros] * len(EnvStep._fields))
    trajectory = Trajectory(observation, observation, {}, step)
    last = jnp.asarray([60, 61])
    grouped, ends = side_by_side(trajectory, last, rollouts)
    assert grouped.observation.shape == (length, rollouts * copies)
    for r in range(rollouts):
        for n in range(copies):
            sequence = r * copies + n
            assert grouped.observation[:, sequence].tolist() == [10 * (r * length + t) + n for t in range(length)]
            assert int(ends[sequence]) == 10 * (r + 1) * length + n
    alone, alone_last = side_by_side(trajectory, last, 1)
    assert alone is trajectory and alone_last is last


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_batch_of_two_rollouts_unrolls_every_copy_twice_per_update(tmp_path):
    experiment, _ = compose_experiment(TWO_ROLLOUTS, str(tmp_path))
    assert experiment.builder.config.batch_size == 8 and experiment.num_envs == 4
    system = make_system(experiment)
    assert system.rollouts == 2
    assert type(system).steps_per_update(experiment.builder.config, 4) == 2 * 4 * 16
    state = jax.jit(system.init)(jax.random.PRNGKey(0))
    updated, metrics, steps = jax.jit(system.update)(state)
    assert steps.reward.shape == (32, 4)  # Both rollouts, in the order they were stepped.
    assert int(metrics["steps_in_batch"]) == 8 * 16
    assert int(updated.learner.actor_steps) == 128


@pytest.mark.current
def test_a_compiled_ppo_normalises_what_it_acts_on_and_bootstraps_from(tmp_path):
    """With agent.normalize_observations the learner's statistics count the batch's steps; the bootstrap
    value reads observations normalised as the policy does, in reward units (divided by reward_scale)."""
    overrides = [*TWO_ROLLOUTS, "agent.normalize_observations=true", "agent.reward_scale=4.0"]
    experiment, _ = compose_experiment(overrides, str(tmp_path))
    system = make_system(experiment)
    state = jax.jit(system.init)(jax.random.PRNGKey(1))
    updated, _, _ = jax.jit(system.update)(state)
    statistics = updated.learner.observation_statistics
    assert int(statistics.count) == 2 * 4 * 16  # Two rollouts' 4 sequences of 16 steps (not the rows they end on).
    assert float(jnp.max(jnp.abs(statistics.mean))) > 0
    observations = jax.random.normal(jax.random.PRNGKey(2), (5, 4)) * 3.0
    clip = experiment.builder.config.observation_clip
    network = experiment.network_factory(environment_spec=experiment.environment_spec)
    normalised = normalize_observations(statistics, observations, clip)
    expected = network.apply(updated.learner.params, normalised)[1] / 4.0
    np.testing.assert_allclose(system.bootstrap_value(updated.learner, observations), expected, rtol=1e-6)


@pytest.mark.current
def test_reward_scale_trains_on_scaled_rewards(tmp_path):
    """One PPO update with reward_scale=3 is the update without it on rewards three times as large."""
    experiment, _ = compose_experiment(TWO_ROLLOUTS, str(tmp_path / "plain"))
    scaled_experiment, _ = compose_experiment([*TWO_ROLLOUTS, "agent.reward_scale=3"], str(tmp_path / "scaled"))
    system = make_system(experiment)
    state = jax.jit(system.init)(jax.random.PRNGKey(3))
    environment, trajectory = jax.jit(lambda s: system.act(s, s.key, 16, jnp.zeros((), jnp.int32)))(state)
    values = jnp.zeros(trajectory.step.reward.shape)
    batch = to_sequences(trajectory, environment.observation, values, 0.99)

    def update(experiment, batch):
        network = experiment.network_factory(environment_spec=experiment.environment_spec)
        learning = experiment.builder.make_learning(network)
        learner = learning.init(jax.random.PRNGKey(4))
        return jax.jit(learning.sgd_step)(learner, Batch.uniform(batch))[0].params

    scaled = update(scaled_experiment, batch)
    tripled = update(experiment, batch._replace(reward=batch.reward * 3.0))
    plain = update(experiment, batch)
    for ours, theirs in zip(jax.tree_util.tree_leaves(scaled), jax.tree_util.tree_leaves(tripled)):
        np.testing.assert_array_equal(ours, theirs)
    moved = [np.abs(a - b).max() for a, b in zip(jax.tree_util.tree_leaves(scaled), jax.tree_util.tree_leaves(plain))]
    assert max(moved) > 0  # The scale does change the update.


@pytest.mark.current
def test_a_run_of_two_rollouts_an_update_with_normalised_observations_finishes(tmp_path):
    from conftest import read_summary, run_train

    run_dir = tmp_path / "run"
    command = [*TWO_ROLLOUTS, "agent.normalize_observations=true", f"hydra.run.dir={run_dir}"]
    result = run_train(command, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(run_dir))
    assert summary["status"] == "finished" and summary["actor_steps"] == 1024


# SAC on gymnax Pendulum under launcher=anakin, small: 4 copies, 4 SGD steps of 32 an update once 64 are stored.
SMALL_SAC = [
    "experiment=sac_gymnax_pendulum",
    "agent.batch_size=32",
    "agent.min_replay_size=64",
    "agent.samples_per_insert=32",
    "network.policy_hidden_sizes=[32]",
    "network.critic_hidden_sizes=[32]",
    *short_compiled_run(256, 128),
]


@pytest.mark.current
def test_a_continuous_agent_normalises_its_batches_and_acts_on_normalised_observations(tmp_path):
    """SAC with agent.normalize_observations: each SGD step folds its batch's observations into the statistics and
    trains on them normalised; the policy's parameters carry the statistics and the policy reads observations
    normalised alike. Without the option the learner state is what it was (no statistics in it)."""
    from rl.agents.normalisation import normalize_observations as normalise

    plain, _ = compose_experiment(SMALL_SAC, str(tmp_path / "plain"))
    experiment, _ = compose_experiment([*SMALL_SAC, "agent.normalize_observations=true"], str(tmp_path / "norm"))
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    learning = experiment.builder.make_learning(networks)
    state = learning.init(jax.random.PRNGKey(0))
    plain_state = plain.builder.make_learning(networks).init(jax.random.PRNGKey(0))
    assert not hasattr(plain_state, "observation_statistics")
    assert int(state.observation_statistics.count) == 0
    observations = jax.random.normal(jax.random.PRNGKey(1), (32, 3)) * 5.0 + 2.0
    transitions = Transition(observations, jnp.zeros((32, 1)), jnp.zeros(32), jnp.ones(32), observations)
    state, _, _ = jax.jit(learning.sgd_step)(state, Batch.uniform(transitions))
    statistics = state.observation_statistics
    assert int(statistics.count) == 32
    np.testing.assert_allclose(statistics.mean, observations.mean(axis=0), rtol=1e-5)
    params = learning.policy_params(state)
    policy = experiment.builder.make_policy(networks, experiment.environment_spec, evaluation=True)
    plain_policy = plain.builder.make_policy(networks, experiment.environment_spec, evaluation=True)
    key = jax.random.PRNGKey(2)
    step = jnp.zeros((), jnp.int32)
    acted = policy(params, key, observations, step)
    clip = experiment.builder.config.observation_clip
    expected = plain_policy(params[0], key, normalise(statistics, observations, clip), step)
    np.testing.assert_allclose(acted, expected, rtol=1e-6)
    unnormalised = plain_policy(params[0], key, observations, step)
    assert not np.allclose(acted, unnormalised)  # The statistics do change what it does.


@pytest.mark.current
def test_a_compiled_sac_run_with_normalised_observations_finishes(tmp_path):
    from conftest import read_summary, run_train

    run_dir = tmp_path / "run"
    result = run_train([*SMALL_SAC, "agent.normalize_observations=true", f"hydra.run.dir={run_dir}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(run_dir))
    assert summary["status"] == "finished" and summary["actor_steps"] == 256
