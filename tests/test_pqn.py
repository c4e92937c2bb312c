"""PQN: its maths pinned on hand-computed numbers (the Q(lambda) targets over a rollout with a termination and a
truncation, the Q loss, the epsilon schedule it acts with, the layer norm in its network), its compiled update's
clock, a learning run of the CartPole preset, and its defaults under launcher=local and ray (a queue, as PPO's)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, run_train, read_summary
from rl.agents.pqn import PQNConfig
from rl.agents.pqn.builder import q_lambda_targets, q_loss
from rl.environments.gymnax_vector import EnvStep
from rl.experiments.make_experiment import make_experiment
from rl.systems.base import Trajectory
from rl.systems.on_policy import to_sequences

CONF = os.path.join(ROOT, "conf")


def compose_experiment(overrides: list[str], run_dir: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    return make_experiment(config, run_dir, {"agent": "pqn"})


# --------------------------------------------------------------------------- the maths


def test_q_lambda_targets_of_a_compiled_rollout_with_a_termination_and_a_truncation():
    """gamma = lambda = 0.5, rewards 1, v_t = max_a Q(s_t, a) = [1, 2, 3, 4] on the steps and 5 on the bootstrap
    row; the episode terminates after step 1, and is truncated after step 2 with v(s_final) = 6, which
    to_sequences folds into that step's reward (1 + 0.5 * 6 = 4, discount 0):
      G_3 = 1 + 0.5 * 5                              = 3.5   (the rollout's end bootstraps from v_4)
      G_2 = 4                                        = 1 + 0.5 * v(s_final)
      G_1 = 1                                                (terminal: no bootstrap)
      G_0 = 1 + 0.5 * (0.5 * v_1 + 0.5 * G_1)       = 1.75."""
    T = 4
    done = jnp.array([[False], [True], [True], [False]])
    truncated = jnp.array([[False], [False], [True], [False]])
    step = EnvStep(
        observation=jnp.zeros((T, 1, 1)),
        reward=jnp.ones((T, 1)),
        discount=1.0 - (done & ~truncated),
        done=done,
        truncated=truncated,
        final_observation=jnp.zeros((T, 1, 1)),
        episode_return=jnp.zeros((T, 1)),
        episode_length=jnp.zeros((T, 1), jnp.int32),
    )
    trajectory = Trajectory(jnp.zeros((T, 1, 1)), jnp.zeros((T, 1), jnp.int32), {}, step)
    final_values = jnp.full((T, 1), 6.0)
    batch = to_sequences(trajectory, jnp.zeros((1, 1)), final_values, 0.5)
    np.testing.assert_allclose(batch.reward[0], [1.0, 1.0, 4.0, 1.0, 0.0])
    np.testing.assert_allclose(batch.discount[0], [1.0, 0.0, 0.0, 1.0, 1.0])
    values = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    targets = q_lambda_targets(batch.reward[0], batch.discount[0], values, batch.mask[0], gamma=0.5, lambda_=0.5)
    np.testing.assert_allclose(targets, [1.75, 1.0, 4.0, 3.5], rtol=1e-6)


def test_q_lambda_targets_of_a_queued_sequence_ending_in_a_truncation():
    """launcher=local's sequences: a truncation keeps discount 1 and is followed by the final observation's row
    (mask 0), then padding. gamma = lambda = 0.5, v = [1, 2, 3, 0]:
      G_1 = 1 + 0.5 * v_2                            = 2.5   (the trace is cut: bootstraps from v(s_final) alone)
      G_0 = 1 + 0.5 * (0.5 * v_1 + 0.5 * G_1)       = 2.125."""
    rewards = jnp.array([1.0, 1.0, 0.0, 0.0])
    discounts = jnp.array([1.0, 1.0, 0.0, 0.0])
    mask = jnp.array([1.0, 1.0, 0.0, 0.0])
    values = jnp.array([1.0, 2.0, 3.0, 0.0])
    targets = q_lambda_targets(rewards, discounts, values, mask, gamma=0.5, lambda_=0.5)
    np.testing.assert_allclose(targets[:2], [2.125, 2.5], rtol=1e-6)


def test_q_lambda_targets_at_lambda_0_and_1():
    """lambda 0: one-step Q-learning targets r_t + gamma d_t v_{t+1}; lambda 1: the discounted return
    bootstrapped from the last row."""
    rewards = jnp.array([1.0, 2.0, 3.0, 0.0])
    discounts = jnp.ones(4)
    mask = jnp.array([1.0, 1.0, 1.0, 0.0])
    values = jnp.array([10.0, 20.0, 30.0, 40.0])
    gamma = 0.9
    one_step = q_lambda_targets(rewards, discounts, values, mask, gamma=gamma, lambda_=0.0)
    np.testing.assert_allclose(one_step, [1 + 0.9 * 20, 2 + 0.9 * 30, 3 + 0.9 * 40], rtol=1e-6)
    monte_carlo = q_lambda_targets(rewards, discounts, values, mask, gamma=gamma, lambda_=1.0)
    np.testing.assert_allclose(monte_carlo[0], 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 40, rtol=1e-6)


def test_the_q_loss_is_half_the_mean_squared_error_of_the_taken_actions_on_rows_taken():
    q_values = jnp.array([[1.0, 2.0], [3.0, 5.0], [0.0, 0.0]])
    actions = jnp.array([1, 0, 1])
    targets = jnp.array([1.0, 4.0, 9.0])
    mask = jnp.array([1.0, 1.0, 0.0])  # The last row took no step: left out.
    assert float(q_loss(q_values, actions, targets, mask)) == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    gradient = jax.grad(q_loss, argnums=(0, 2))(q_values, actions, targets, mask)
    np.testing.assert_allclose(gradient[0], [[0.0, 0.5], [-0.5, 0.0], [0.0, 0.0]])  # (Q - G) * m / sum(m).
    np.testing.assert_allclose(gradient[1], 0.0)  # The targets are held fixed.


def test_a_bad_setting_is_one_clear_error():
    with pytest.raises(ValueError, match=r"num_minibatches \(3\) must divide"):
        PQNConfig(batch_size=4, unroll_length=16, num_minibatches=3)
    with pytest.raises(ValueError, match=r"q_lambda must be in \[0, 1\], got 1.5"):
        PQNConfig(q_lambda=1.5)


# --------------------------------------------------------------------------- acting and the network


@pytest.mark.current  # The compiled path, the same on both stacks.
def test_epsilon_decays_linearly_over_the_presets_share_of_the_run_and_the_policy_acts_with_it(tmp_path):
    """pqn_gymnax_cartpole: epsilon 1 -> 0.05 over the first 20% of its 524,288 actor steps (the compiled
    rollout's clock); the behaviour policy acts uniformly at random at epsilon 1 and greedily at epsilon 0."""
    experiment, _ = compose_experiment(["experiment=pqn_gymnax_cartpole"], str(tmp_path))
    head = experiment.builder.exploration
    decay = round(0.2 * 524288)
    assert head.decay_steps == decay
    epsilons = [float(head.epsilon(step)) for step in (0, decay // 2, decay, 524288)]
    np.testing.assert_allclose(epsilons, [1.0, 0.525, 0.05, 0.05], rtol=1e-6)
    assert head.exploration_metrics(decay // 2)["epsilon"] == pytest.approx(0.525)

    experiment, _ = compose_experiment(["experiment=pqn_gymnax_cartpole", "policy.epsilon_end=0"], str(tmp_path))
    spec = experiment.environment_spec
    network = experiment.network_factory(environment_spec=spec)
    policy = experiment.builder.make_policy(network, spec, evaluation=False)
    params = network.init(jax.random.PRNGKey(0))
    observations = jax.random.normal(jax.random.PRNGKey(1), (4000, 4))
    greedy = jnp.argmax(network.apply(params, observations), axis=-1)
    key = jax.random.PRNGKey(2)
    at_start, extras = policy(params, key, observations, jnp.asarray(0))
    assert extras == {}
    assert 0.45 < float(jnp.mean(at_start != greedy)) < 0.55  # A random action differs from greedy half the time.
    after, _ = policy(params, key, observations, jnp.asarray(decay))
    np.testing.assert_array_equal(after, greedy)


@pytest.mark.current  # The compiled path, the same on both stacks.
def test_layer_norm_is_in_the_q_network_when_the_option_is_on(tmp_path):
    """network=layer_norm_mlp (PQN's default) is make_q_network with layer_norm on: a LayerNorm after each hidden
    layer; network=mlp (layer_norm off, as other agents use it) has none."""
    from rl.networks import make_q_network

    experiment, _ = compose_experiment(["agent=pqn"], str(tmp_path))
    network = experiment.network_factory(environment_spec=experiment.environment_spec)
    params = network.init(jax.random.PRNGKey(0))
    norms = [name for name in params if "layer_norm" in name]
    assert len(norms) == 2 and all(set(params[name]) == {"scale", "offset"} for name in norms)
    plain = make_q_network(experiment.environment_spec, hidden_sizes=(128, 128))
    assert not [name for name in plain.init(jax.random.PRNGKey(0)) if "layer_norm" in name]
    assert [params[name]["scale"].shape for name in sorted(norms)] == [(128,), (128,)]


# --------------------------------------------------------------------------- the compiled update


@pytest.mark.current  # The compiled path, the same on both stacks.
def test_one_compiled_update_trains_on_one_rollout_of_every_copy(tmp_path):
    """An update: unroll_length steps of each copy, num_epochs * num_minibatches SGD steps, the learner's clock
    (learning rate, and the behaviour policy's epsilon) advanced by the steps taken."""
    from rl.anakin.build import make_system

    experiment, _ = compose_experiment(
        [
            "experiment=pqn_gymnax_cartpole",
            "environment.num_envs=4",
            "agent.batch_size=4",
            "agent.unroll_length=8",
            "agent.num_minibatches=2",
            "network.hidden_sizes=[16]",
            "max_actor_steps=64",
            "eval_every=32",
        ],
        str(tmp_path),
    )
    system = make_system(experiment)
    state = system.init(jax.random.PRNGKey(0))
    state, metrics, step = jax.jit(system.update)(state)
    assert int(state.learner.actor_steps) == 32 and int(state.learner.steps) == 1
    assert step.reward.shape == (8, 4) and float(metrics["steps_in_batch"]) == 32
    assert float(metrics["learning_rate"]) == pytest.approx(1e-4)  # Its clock read 0 at the update's start.
    assert all(np.isfinite(float(value)) for value in metrics.values())


# --------------------------------------------------------------------------- learning


@pytest.mark.current  # The compiled path, the same on both stacks.
def test_pqn_gymnax_cartpole_learns(tmp_path):
    """The preset ends at 475 or more on seed 0 (its schedules follow max_actor_steps, so a shorter run is
    another run): the default suite's learning check. The whole preset over 10 seeds: docs/baselines.md."""
    experiment, launcher = compose_experiment(
        ["experiment=pqn_gymnax_cartpole", "seed=0", "logger=csv", "progress=false", "checkpoint.enabled=false"],
        str(tmp_path),
    )
    summary = launcher(experiment)
    assert summary.final_eval_return >= 475, summary.eval_returns
    assert summary.actor_steps == 524288


# --------------------------------------------------------------------------- the queue (launcher=local, ray)

SHORT = ["agent=pqn", "max_actor_steps=2000", "eval_every=1000", "eval_episodes=2", "logger=csv", "progress=false"]


def _check_run(run_dir: str) -> None:
    import csv

    summary = read_summary(run_dir)
    assert summary["status"] == "finished" and summary["agent"] == "pqn" and summary["actor_steps"] == 2000
    with open(os.path.join(run_dir, "logs", "learner.csv"), newline="") as file:
        losses = [float(row["loss"]) for row in csv.DictReader(file) if row.get("loss")]
    assert losses and all(np.isfinite(losses))


@pytest.mark.reverb
def test_its_defaults_run_under_launcher_local_through_a_queue(tmp_path):
    result = run_train([*SHORT, f"hydra.run.dir={tmp_path}"], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    _check_run(str(tmp_path))


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.reverb
def test_its_defaults_run_under_launcher_ray(tmp_path):
    result = run_train([*SHORT, "launcher=ray", "launcher.num_actors=1", f"hydra.run.dir={tmp_path}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    _check_run(str(tmp_path))
