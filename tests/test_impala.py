"""IMPALA: V-trace and the loss against hand and numpy computations, behaviour
log-probabilities reaching the learner unchanged, configuration checks, a smoke run and
(under -m slow) the learning runs of issue 12.

Real parts throughout: an in-process reverb queue with the tables IMPALA uses, the
builder's adder, actor and learner, and the real entry point for the runs.
"""

from __future__ import annotations

import math
import time

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reverb
from dm_env import specs

from conftest import read_summary, run_train
from rl.agents.impala import IMPALAConfig
from rl.agents.impala.builder import IMPALABuilder
from rl.agents.impala.builder import impala_loss, vtrace_targets
from rl.counting import Counter
from rl.replay.adders import SequenceStep
from rl.replay.server import make_server
from rl.core import EnvironmentSpec

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

SPEC = EnvironmentSpec(
    observations=specs.Array((3,), np.float32, "observation"),
    actions=specs.DiscreteArray(2, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)


def numpy_vtrace(values, rewards, discounts, mask, log_rhos, gamma, lambda_, rho_bar, pg_rho_bar):
    """The paper's recursion written out step by step, for rows 0..L-2, with the trace cut
    (lambda_t = 0) before a row where no step was taken."""
    n = len(values) - 1
    rho = np.exp(np.asarray(log_rhos, np.float64))
    targets = np.zeros(n + 1)
    targets[n] = values[n]
    advantages = np.zeros(n)
    for t in reversed(range(n)):
        g = gamma * discounts[t]
        lam = lambda_ * mask[t + 1]
        delta = min(rho_bar, rho[t]) * (rewards[t] + g * values[t + 1] - values[t])
        targets[t] = values[t] + delta + g * lam * min(1.0, rho[t]) * (targets[t + 1] - values[t + 1])
        bootstrap = lam * targets[t + 1] + (1.0 - lam) * values[t + 1]
        advantages[t] = min(pg_rho_bar, rho[t]) * (rewards[t] + g * bootstrap - values[t])
    return targets[:n], advantages


def test_vtrace_on_a_hand_computed_example():
    """gamma 0.9, values [1, 2, 3], rewards [1, 1, 0], every row a step taken."""
    values, rewards, ones = jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray([1.0, 1.0, 0.0]), jnp.ones(3)
    # On-policy (rho = 1): n-step returns. v_1 = 1 + .9*3 = 3.7, v_0 = 1 + .9*3.7 = 4.33;
    # A_1 = 3.7 - 2 = 1.7, A_0 = 1 + .9*3.7 - 1 = 3.33.
    targets, advantages = vtrace_targets(values, rewards, ones, ones, jnp.zeros(3), 0.9)
    np.testing.assert_allclose(targets, [4.33, 3.7], rtol=1e-6)
    np.testing.assert_allclose(advantages, [3.33, 1.7], rtol=1e-6)
    # rho_0 = 2: clipped to 1 by the default thresholds (nothing changes) ...
    log_rhos = jnp.log(jnp.asarray([2.0, 1.0, 1.0]))
    targets, advantages = vtrace_targets(values, rewards, ones, ones, log_rhos, 0.9)
    np.testing.assert_allclose(targets, [4.33, 3.7], rtol=1e-6)
    np.testing.assert_allclose(advantages, [3.33, 1.7], rtol=1e-6)
    # ... but not by thresholds of 2 (c_0 = min(1, rho_0) = 1 still):
    # delta_0 = 2 * (1 + 1.8 - 1) = 3.6, v_0 = 1 + 3.6 + .9 * (3.7 - 2) = 6.13; A_0 = 2 * 3.33.
    targets, advantages = vtrace_targets(values, rewards, ones, ones, log_rhos, 0.9, 1.0, 2.0, 2.0)
    np.testing.assert_allclose(targets, [6.13, 3.7], rtol=1e-6)
    np.testing.assert_allclose(advantages, [6.66, 1.7], rtol=1e-6)


@pytest.mark.parametrize("lambda_,rho_bar,pg_rho_bar", [(1.0, 1.0, 1.0), (0.9, 1.5, 0.8)])
def test_vtrace_matches_an_independent_numpy_implementation(lambda_, rho_bar, pg_rho_bar):
    """Random sequences of 7 rows, three ways to end: running on, a termination after
    row 2 (final observation in row 3, padding after), a truncation after row 4."""
    rng = np.random.default_rng(0)
    cases = [
        (np.ones(7), np.ones(7)),
        (np.asarray([1, 1, 0, 0, 0, 0, 0.0]), np.asarray([1, 1, 1, 0, 0, 0, 0.0])),
        (np.asarray([1, 1, 1, 1, 1, 0, 0.0]), np.asarray([1, 1, 1, 1, 1, 0, 0.0])),
    ]
    for discounts, mask in cases:
        values = rng.normal(size=7)
        rewards = rng.normal(size=7) * mask
        log_rhos = rng.normal(scale=0.7, size=7)
        expected = numpy_vtrace(values, rewards, discounts, mask, log_rhos, 0.97, lambda_, rho_bar, pg_rho_bar)
        as_jax = lambda x: jnp.asarray(x, jnp.float32)
        targets, advantages = vtrace_targets(
            as_jax(values),
            as_jax(rewards),
            as_jax(discounts),
            as_jax(mask),
            as_jax(log_rhos),
            0.97,
            lambda_,
            rho_bar,
            pg_rho_bar,
        )
        steps = mask[:-1] > 0  # Only the rows of steps taken are trained on.
        np.testing.assert_allclose(np.asarray(targets)[steps], expected[0][steps], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(advantages)[steps], expected[1][steps], rtol=1e-5, atol=1e-5)


def _tiny_apply(params, observation):
    """A 'network' that returns per-observation logits and values from its parameters."""
    index = observation[:, 0].astype(jnp.int32)
    return params["logits"][index], params["values"][index]


def test_impala_loss_on_a_tiny_batch_against_a_hand_computation():
    """One sequence: steps at observations 0 and 1, then a time-limit truncation whose
    final observation (2) only bootstraps; behaviour = current policy (rho = 1)."""
    params = {
        "logits": jnp.log(jnp.asarray([[3.0, 1.0], [1.0, 1.0], [1.0, 9.0]])),  # pi = [.75, .25], [.5, .5], [.1, .9]
        "values": jnp.asarray([1.0, 2.0, 50.0]),
    }
    batch = SequenceStep(
        observation=jnp.asarray([[[0.0], [1.0], [2.0]]]),
        action=jnp.asarray([[0, 1, 0]]),
        reward=jnp.asarray([[1.0, 1.0, 0.0]]),
        discount=jnp.asarray([[1.0, 1.0, 0.0]]),
        mask=jnp.asarray([[1.0, 1.0, 0.0]]),
        extras={"log_prob": jnp.log(jnp.asarray([[0.75, 0.5, 1.0]]))},
    )
    loss, metrics = impala_loss(params, _tiny_apply, batch, batch.action, 0.9, 0.5, 0.01)
    # v_1 = 1 + .9 * 50 = 46 (bootstrapped from the final observation), v_0 = 1 + .9 * 46 = 42.4;
    # A_0 = 42.4 - 1 = 41.4, A_1 = 46 - 2 = 44.
    value = 0.5 * ((42.4 - 1.0) ** 2 + (46.0 - 2.0) ** 2) / 2
    policy = -(41.4 * math.log(0.75) + 44.0 * math.log(0.5)) / 2
    entropy = (-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) + math.log(2.0)) / 2
    assert float(metrics["value_loss"]) == pytest.approx(value, rel=1e-5)
    assert float(metrics["policy_loss"]) == pytest.approx(policy, rel=1e-5)
    assert float(metrics["entropy"]) == pytest.approx(entropy, rel=1e-5)
    assert float(metrics["mean_rho"]) == pytest.approx(1.0, rel=1e-6)
    assert float(loss) == pytest.approx(policy + 0.5 * value - 0.01 * entropy, rel=1e-5)
    # The policy's gradient is the advantage-weighted score: d/dlogits_0[0] of
    # -A_0 log pi(0|0) / 2 is -A_0 (1 - .75) / 2; the targets carry no gradient into V_2.
    gradients = jax.grad(lambda p: impala_loss(p, _tiny_apply, batch, batch.action, 0.9, 0.5, 0.0)[0])(params)
    assert float(gradients["logits"][0, 0]) == pytest.approx(-41.4 * 0.25 / 2, rel=1e-5)
    assert float(gradients["values"][2]) == 0.0


class _Recorder:
    def __init__(self):
        self.records = []

    def write(self, record):
        self.records.append(record)

    def close(self):
        pass


def _timestep(step_type, observations):
    count = len(observations)
    return dm_env.TimeStep(
        step_type=np.full(count, step_type, np.int8),
        reward=np.ones(count, np.float32),
        discount=np.ones(count, np.float32),
        observation=np.asarray(observations, np.float32),
    )


def test_behaviour_log_probs_reach_the_learners_batch_unchanged():
    """The builder's actor, adder, queue, iterator and learner: the log-probabilities the
    behaviour policy computed are the batch's extras, row for row, and the learner (whose
    parameters the actor used) sees importance ratios of exactly 1."""
    from rl.networks.base import log_prob, make_policy_value_network
    from rl.systems.learning import SGDLearner

    config = IMPALAConfig(unroll_length=4, batch_size=2)
    builder = IMPALABuilder(config)
    network = make_policy_value_network(SPEC, (8,), (8,))
    server = make_server(builder.make_replay_tables(SPEC))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        samples = []

        def recording(iterator):
            for sample in iterator:
                samples.append(sample)
                yield sample

        logger = _Recorder()
        iterator = builder.make_dataset_iterator(client, SPEC)
        learner = SGDLearner(
            builder.make_learning(network),
            jax.random.PRNGKey(0),
            recording(iterator),
            client,
            Counter(),
            logger,
        )
        policy = builder.make_policy(network, SPEC, evaluation=False)
        actor = builder.make_actor(jax.random.PRNGKey(1), policy, SPEC, learner, builder.make_adder(client, SPEC))
        rng = np.random.default_rng(0)
        timestep = _timestep(dm_env.StepType.FIRST, rng.normal(size=(2, 3)))
        actor.observe_first(timestep)
        stored = []
        for _ in range(config.sequence_length):  # Each copy completes one item of 5 rows.
            actions = actor.select_action(timestep.observation)
            stored.append(actor._extras["log_prob"].copy())
            timestep = _timestep(dm_env.StepType.MID, rng.normal(size=(2, 3)))
            actor.observe(actions, timestep)
        assert actor.adder.num_items == 2
        acted_with = learner.state.params  # The parameters the actor used (the learner's initial ones).
        learner.step()
        iterator.close()  # While the server is up: a stopped server's sampler retries forever.
        batch = samples[0].data  # What the learner trains on (rl/agents/builder.py `Batch.data`).
        expected = np.stack(stored, axis=1)  # (copies, rows): copy 0's item went in first.
        np.testing.assert_array_equal(np.asarray(batch.extras["log_prob"]), expected)
        assert np.all(expected < 0.0)
        (record,) = logger.records
        assert record["steps"] == 1 and float(record["steps_in_batch"]) == 2 * config.unroll_length
        assert float(record["mean_rho"]) == pytest.approx(1.0, abs=1e-4)
        # The learner's own log pi of the stored actions, with the parameters the actor used:
        # log rho = log pi - log mu is 0 up to float rounding (batched vs per-step programs).
        output, _ = network.apply(acted_with, np.reshape(batch.observation, (-1, 3)))
        log_pi = np.reshape(log_prob(output, np.reshape(batch.action, (-1,))), expected.shape)
        np.testing.assert_allclose(log_pi, expected, atol=1e-4)
    finally:
        server.stop()


def test_configuration_mismatches_are_refused_before_anything_starts(tmp_path):
    from test_config import build

    from rl.experiments.validation import ConfigError

    with pytest.raises(ConfigError, match="network: 'mlp' builds q_values networks, but the agent needs policy_value"):
        build(["agent=impala", "network=mlp"], tmp_path)
    with pytest.raises(ConfigError, match="agent: impala acts with samples of its own policy.*policy=sample"):
        build(["agent=impala", "policy=epsilon_greedy"], tmp_path)
    with pytest.raises(ConfigError, match="max_queue_size"):
        build(["agent=impala", "agent.max_queue_size=4"], tmp_path)
    with pytest.raises(ConfigError, match="optimizer must be one of adam, rmsprop"):
        build(["agent=impala", "agent.optimizer=sgd"], tmp_path)
    with pytest.raises(ConfigError, match="normalize_observations"):
        build(["agent=impala", "+agent.normalize_observations=true"], tmp_path)
    experiment, _ = build(["experiment=impala_cartpole"], tmp_path)
    builder = experiment.builder
    assert isinstance(builder, IMPALABuilder) and experiment.num_envs == 8
    # The learning rate decays over the run's budget.
    assert builder.config.decay_actor_steps == experiment.max_actor_steps == 500_000
    experiment, _ = build(["experiment=impala_cartpole", "max_actor_steps=1000"], tmp_path)
    assert experiment.builder.config.decay_actor_steps == 1000


def test_impala_smoke_run_through_actor_replay_and_learner(run_dir):
    """A few thousand steps of the real entry point: the queue fills, the learner trains."""
    result = run_train(
        [
            "experiment=impala_cartpole",
            "max_actor_steps=4000",
            "eval_every=4000",
            "eval_episodes=2",
            "checkpoint=false",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["status"] == "finished" and summary["actor_steps"] == 4000 and summary["agent"] == "impala"
    # 40-step batches (8 sequences of 5 steps): about 100 learner steps.
    assert summary["learner_steps"] >= 50


def _learn(run_dir, *overrides):
    start = time.perf_counter()
    result = run_train(
        [
            "experiment=impala_cartpole",
            "seed=0",
            "eval_every=500000",
            "checkpoint=false",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    print(
        f"impala_cartpole {' '.join(overrides)}: final {summary['final_eval_return']} after "
        f"{summary['actor_steps']} actor steps, run {summary['wall_time_s']:.1f} s, "
        f"process {time.perf_counter() - start:.1f} s"
    )
    assert summary["actor_steps"] == 500_000
    assert summary["final_eval_return"] >= 400.0, summary


@pytest.mark.slow
def test_impala_learns_cartpole(run_dir):
    _learn(run_dir)


@pytest.mark.slow
@pytest.mark.ray
def test_impala_learns_cartpole_under_ray_with_two_actors(run_dir):
    _learn(run_dir, "launcher=ray", "launcher.num_actors=2")


def test_fused_sgd_steps_each_take_their_own_slice_of_the_batch():
    """sgd_steps_per_learner_step = 2: one learner step runs two SGD steps in one
    lax.scan, each on batch_size sequences, and the schedule's clock counts the steps
    taken in both (padding rows not counted)."""
    from types import SimpleNamespace

    from rl.systems.learning import SGDLearner
    from rl.networks.base import make_policy_value_network

    config = IMPALAConfig(
        unroll_length=4,
        batch_size=1,
        sgd_steps_per_learner_step=2,
        decay_actor_steps=100,
        final_learning_rate_fraction=0.0,
    )
    rng = np.random.default_rng(0)
    mask = np.asarray([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], np.float32)  # The second ends after 2 steps.
    batch = SequenceStep(
        observation=rng.normal(size=(2, 5, 3)).astype(np.float32),
        action=np.zeros((2, 5), np.int32),
        reward=mask.copy(),
        discount=mask.copy(),
        mask=mask,
        extras={"log_prob": np.full((2, 5), math.log(0.5), np.float32) * mask},
    )
    logger = _Recorder()
    network = make_policy_value_network(SPEC, (8,), (8,))
    sample = SimpleNamespace(keys=None, probabilities=np.ones(2), table_size=np.zeros(2), data=batch)
    learner = SGDLearner(
        IMPALABuilder(config).make_learning(network),
        jax.random.PRNGKey(0),
        iter([sample]),
        counter=Counter(),
        logger=logger,
    )
    learner.step()
    assert int(learner.state.steps) == 2 and int(learner.state.actor_steps) == 4 + 2
    (record,) = logger.records
    assert float(record["steps_in_batch"]) == pytest.approx((4 + 2) / 2)  # The mean over the two SGD steps.
    # The learning rate decays with the steps trained on: 6e-4, then 6e-4 * (1 - 4 / 100).
    assert float(record["learning_rate"]) == pytest.approx(6e-4 * (1.0 + 0.96) / 2, rel=1e-5)
