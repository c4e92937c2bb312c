"""PPO and the sequence replay it learns from: exact unit checks and a learning run.

Real parts throughout: in-process reverb servers with the tables PPO uses, gymnasium
CartPole, the real entry point for the learning runs. The tests of the replay and of the runs under
launcher=local need the reverb stack (marked `reverb`); those of the losses run on both stacks.
"""

from __future__ import annotations

import math
import time

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dm_env import specs

from conftest import read_summary, run_train
from rl.agents.normalisation import init_statistics, normalize_observations, update_statistics
from rl.agents.on_policy import PolicyParams
from rl.agents.ppo import PPOConfig
from rl.agents.ppo.builder import PPOBuilder
from rl.agents.ppo.builder import Minibatch, clipped_surrogate_loss, ppo_loss, sequence_advantages, value_loss
from rl.replay.adders import ReplayTimeoutError
from rl.replay.adders import SequenceAdder, decode_sequences, sequence_signature, step_spec
from rl.core import EnvironmentSpec

TABLE = "queue"
SPEC = EnvironmentSpec(
    observations=specs.Array((1,), np.float32, "observation"),
    actions=specs.DiscreteArray(2, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
EXTRAS = {"log_prob": specs.Array((), np.float32, "log_prob")}


def _timestep(step_type, observations, rewards=None, discounts=None):
    count = len(observations)
    return dm_env.TimeStep(
        step_type=np.full(count, step_type, np.int8) if np.isscalar(step_type) else np.asarray(step_type, np.int8),
        reward=np.asarray(rewards if rewards is not None else np.zeros(count), np.float32),
        discount=np.asarray(discounts if discounts is not None else np.ones(count), np.float32),
        observation=np.asarray(observations, np.float32).reshape(count, 1),
    )


@pytest.fixture
def queue_server():
    """A reverb server with one queue of sequences of 4 rows (CartPole-like rows)."""
    import reverb

    from rl.replay.server import make_queue_table, make_server

    server = make_server([make_queue_table(TABLE, 100, sequence_signature(SPEC, 4, EXTRAS))])
    client = reverb.Client(f"localhost:{server.port}")
    yield server, client
    server.stop()


def _drain(client, count):
    """The first `count` items of the queue, oldest first, as SequenceSteps of numpy arrays."""
    from rl.replay.server import make_replay_iterator

    iterator = make_replay_iterator(client.server_address, TABLE, 1, decode=decode_sequences)
    items = [jax.tree_util.tree_map(lambda x: np.asarray(x[0]), next(iterator).data) for _ in range(count)]
    iterator.close()
    return items


@pytest.mark.reverb
def test_sequence_adder_items_overlap_padding_and_extras(queue_server):
    """Two copies: copy 0 plays 8 steps and terminates, copy 1 plays 5 steps and is
    truncated. Items of 4 rows every 3 (one shared row); an episode's end adds the final
    observation's row and pads with zero rows; every row carries its extras."""
    _, client = queue_server
    adder = SequenceAdder(client, TABLE, step_spec(SPEC, EXTRAS), sequence_length=4, period=3)
    adder.add_first(_timestep(dm_env.StepType.FIRST, [0.0, 100.0]))
    for t in range(8):
        ids = [0, 1] if t < 5 else [0]
        step_type = [
            dm_env.StepType.LAST if (i == 0 and t == 7) or (i == 1 and t == 4) else dm_env.StepType.MID for i in ids
        ]
        # Copy 0 terminates (discount 0); copy 1 is truncated by a time limit (discount 1).
        discounts = [0.0 if (i == 0 and t == 7) else 1.0 for i in ids]
        adder.add(
            np.asarray([t % 2] * len(ids), np.int32),
            _timestep(step_type, [100.0 * i + t + 1 for i in ids], [10.0 * i + t + 0.5 for i in ids], discounts),
            env_ids=ids,
            extras={"log_prob": np.asarray([-(100.0 * i + t) for i in ids], np.float32)},
        )
    assert adder.num_items == 5
    items = _drain(client, 5)
    # (copy, first row's time step) in the order items were written.
    observations = [item.observation[:, 0].tolist() for item in items]
    assert observations == [
        [0.0, 1.0, 2.0, 3.0],  # copy 0, rows 0-3
        [100.0, 101.0, 102.0, 103.0],  # copy 1, rows 0-3
        [103.0, 104.0, 105.0, 0.0],  # copy 1: rows 3-4, final observation 105, padding
        [3.0, 4.0, 5.0, 6.0],  # copy 0, rows 3-6 (row 3 shared with the first item)
        [6.0, 7.0, 8.0, 0.0],  # copy 0: rows 6-7, final observation 8, padding
    ]
    assert [item.mask.tolist() for item in items] == [
        [1, 1, 1, 1],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
    ]
    assert items[2].discount.tolist() == [1.0, 1.0, 0.0, 0.0]  # Truncated: row 4 bootstraps from 105.
    assert items[4].discount.tolist() == [1.0, 0.0, 0.0, 0.0]  # Terminated: row 7 does not.
    assert items[4].reward.tolist() == [6.5, 7.5, 0.0, 0.0]
    assert items[2].reward.tolist() == [13.5, 14.5, 0.0, 0.0]
    assert items[3].action.tolist() == [1, 0, 1, 0] and items[4].action.tolist() == [0, 1, 0, 0]
    assert items[3].extras["log_prob"].tolist() == [-3.0, -4.0, -5.0, -6.0]
    assert items[2].extras["log_prob"].tolist() == [-103.0, -104.0, 0.0, 0.0]


@pytest.mark.reverb
def test_sequence_adder_without_overlap_writes_no_empty_item(queue_server):
    """period == sequence_length: an episode ending right after a full item adds no item
    made of the final observation and padding alone."""
    _, client = queue_server
    adder = SequenceAdder(client, TABLE, step_spec(SPEC, EXTRAS), sequence_length=4, period=4)
    adder.add_first(_timestep(dm_env.StepType.FIRST, [0.0]))
    extras = {"log_prob": np.zeros(1, np.float32)}
    for t in range(4):
        step_type = dm_env.StepType.LAST if t == 3 else dm_env.StepType.MID
        adder.add(np.zeros(1, np.int32), _timestep(step_type, [t + 1.0]), extras=extras)
    assert adder.num_items == 1
    adder.add_first(_timestep(dm_env.StepType.FIRST, [10.0]))
    adder.add(np.zeros(1, np.int32), _timestep(dm_env.StepType.LAST, [11.0], discounts=[0.0]), extras=extras)
    assert adder.num_items == 2
    second = _drain(client, 2)[1]
    assert second.observation[:, 0].tolist() == [10.0, 11.0, 0.0, 0.0] and second.mask.tolist() == [1, 0, 0, 0]


@pytest.mark.reverb
def test_queue_hands_each_item_to_the_learner_once_and_makes_actors_wait():
    """The learner's iterator reads every item exactly once, oldest first; a full queue
    holds the actor's insert until the learner samples."""
    import reverb

    from rl.replay.server import QueueRatio, make_queue_table, make_replay_iterator, make_server

    server = make_server([make_queue_table(TABLE, 6, sequence_signature(SPEC, 4, EXTRAS))])
    try:
        client = reverb.Client(f"localhost:{server.port}")
        adder = SequenceAdder(client, TABLE, step_spec(SPEC, EXTRAS), sequence_length=4, period=3, timeout_ms=300)
        adder.add_first(_timestep(dm_env.StepType.FIRST, [0.0, 1000.0]))
        extras = {"log_prob": np.zeros(2, np.float32)}

        def act(t):
            adder.add(np.zeros(2, np.int32), _timestep(dm_env.StepType.MID, [t + 1.0, 1000.0 + t + 1]), extras=extras)

        for t in range(10):  # Items end at rows 3, 6, 9: 3 items per copy fill the queue (6).
            act(t)
        assert adder.num_items == 6
        ratio = QueueRatio(batch_size=4, max_size=6)
        assert ratio.can_sample(6, 0) and not ratio.can_sample(6, 4)
        with pytest.raises(ReplayTimeoutError) as raised:
            for t in range(10, 13):  # Three more steps complete two items: they cannot go in.
                act(t)
        assert str(raised.value) == (  # The wait is bounded and says where and for how long.
            f"replay server at {client.server_address}: a flush to table {TABLE!r} did not complete within 0.3 s"
        )
        iterator = make_replay_iterator(client.server_address, TABLE, 4, decode=decode_sequences)
        first = np.asarray(next(iterator).data.observation)[:, 0, 0].tolist()
        assert first == [0.0, 1000.0, 3.0, 1003.0]  # FIFO: in the order they were written.
        server_info = client.server_info()[TABLE]
        deadline = time.monotonic() + 10
        while server_info.rate_limiter_info.insert_stats.completed < 8 and time.monotonic() < deadline:
            time.sleep(0.05)  # The two held items go in once the learner has made room.
            server_info = client.server_info()[TABLE]
        assert server_info.rate_limiter_info.insert_stats.completed == 8
        second = np.asarray(next(iterator).data.observation)[:, 0, 0].tolist()
        assert second == [6.0, 1006.0, 9.0, 1009.0]
        sampled = client.server_info()[TABLE].rate_limiter_info.sample_stats.completed
        assert sampled == 8 and client.server_info()[TABLE].current_size == 0  # Each item sampled once.
        iterator.close()
    finally:
        server.stop()


def test_gae_against_a_hand_computation():
    """gamma 0.9, lambda 0.5, values [1, 2, 3, 4]."""
    values = jnp.asarray([1.0, 2.0, 3.0, 4.0])
    # Every row a step taken; the episode terminates after row 1 (discount 0).
    advantages, targets = sequence_advantages(
        jnp.asarray([1.0, 2.0, 3.0, 0.0]), jnp.asarray([1.0, 0.0, 1.0, 1.0]), values, jnp.ones(4), 0.9, 0.5
    )
    # delta = [1 + .9*2 - 1, 2 + 0 - 2, 3 + .9*4 - 3] = [1.8, 0, 3.6]
    # A_2 = 3.6; A_1 = 0 + 0 * ... = 0; A_0 = 1.8 + .9 * .5 * 0 = 1.8
    np.testing.assert_allclose(advantages, [1.8, 0.0, 3.6], rtol=1e-6)
    np.testing.assert_allclose(targets, [2.8, 2.0, 6.6], rtol=1e-6)
    # Truncated after row 1: row 2 holds the final observation (mask 0, discount 0).
    advantages, _ = sequence_advantages(
        jnp.asarray([1.0, 2.0, 0.0, 0.0]),
        jnp.asarray([1.0, 1.0, 0.0, 0.0]),
        values,
        jnp.asarray([1.0, 1.0, 0.0, 0.0]),
        0.9,
        0.5,
    )
    # A_1 = 2 + .9*3 - 2 = 2.7 (bootstrapped from the final observation, trace cut there);
    # A_0 = (1 + .9*2 - 1) + .9*.5*2.7 = 1.8 + 1.215
    np.testing.assert_allclose(advantages[:2], [3.015, 2.7], rtol=1e-6)


def _tiny_apply(params, observation):
    """A 'network' that returns per-observation logits and values from its parameters."""
    index = observation[:, 0].astype(jnp.int32)
    return params["logits"][index], params["values"][index]


def test_ppo_loss_on_a_tiny_batch_against_a_hand_computation():
    params = {
        "logits": jnp.log(jnp.asarray([[3.0, 1.0], [1.0, 1.0], [1.0, 9.0]])),  # pi = [.75, .25], [.5, .5], [.1, .9]
        "values": jnp.asarray([1.0, 2.0, 50.0]),
    }
    batch = Minibatch(
        observation=jnp.asarray([[0.0], [1.0], [2.0]]),
        action=jnp.asarray([0, 1, 1]),
        behaviour_log_prob=jnp.log(jnp.asarray([0.5, 0.8, 0.01])),
        advantage=jnp.asarray([2.0, -1.0, 100.0]),
        target=jnp.asarray([2.0, 0.0, -50.0]),
        old_value=jnp.asarray([0.5, 2.5, 0.0]),
        mask=jnp.asarray([1.0, 1.0, 0.0]),  # The third row is padding: it must not count.
    )
    loss, metrics = ppo_loss(params, _tiny_apply, batch, 0.2, 0.5, 0.01, normalize_advantages=False)
    # Ratios 0.75/0.5 = 1.5 and 0.5/0.8 = 0.625, both outside [0.8, 1.2]:
    # min(1.5*2, 1.2*2) = 2.4; min(0.625*-1, 0.8*-1) = -0.8; policy loss -(2.4 - 0.8)/2 = -0.8.
    assert float(metrics["policy_loss"]) == pytest.approx(-0.8, rel=1e-5)
    assert float(metrics["clip_fraction"]) == pytest.approx(1.0)
    # 0.5 * mean((1 - 2)^2, (2 - 0)^2) = 1.25
    assert float(metrics["value_loss"]) == pytest.approx(1.25, rel=1e-5)
    entropy = (-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) + math.log(2.0)) / 2
    assert float(metrics["entropy"]) == pytest.approx(entropy, rel=1e-5)
    assert float(loss) == pytest.approx(-0.8 + 0.5 * 1.25 - 0.01 * entropy, rel=1e-5)
    # Clipped values: 0.5 + clip(0.5) = 0.7 and 2.5 + clip(-0.5) = 2.3, which are worse:
    # 0.5 * mean(max(1, 1.69), max(4, 5.29)) = 1.745
    clipped = value_loss(_tiny_apply(params, batch.observation)[1], batch.target, batch.mask, batch.old_value, 0.2)
    assert float(clipped) == pytest.approx(1.745, rel=1e-5)


def test_clipped_surrogate_gradient_vanishes_outside_the_clip_range():
    """Past 1 + eps with a positive advantage the objective is flat: no gradient."""
    grad = jax.grad(
        lambda lp: clipped_surrogate_loss(
            lp, jnp.log(jnp.asarray([0.5, 0.5])), jnp.asarray([1.0, 1.0]), 0.2, jnp.ones(2)
        )[0]
    )
    gradient = grad(jnp.log(jnp.asarray([0.75, 0.55])))  # Ratios 1.5 (clipped) and 1.1 (not).
    assert float(gradient[0]) == 0.0 and float(gradient[1]) < 0.0


def test_behaviour_samples_and_evaluation_acts_with_the_mode():
    from rl.networks.base import make_policy_value_network
    from rl.environments.factories import make_gymnasium_environment
    from rl.core import make_environment_spec

    spec = make_environment_spec(make_gymnasium_environment("CartPole-v1", seed=0))
    network = make_policy_value_network(spec, (8,), (8,))
    builder = PPOBuilder(PPOConfig())
    params = network.init(jax.random.PRNGKey(0))
    # Logits favour action 1 strongly for every observation.
    params["policy_head"]["b"] = jnp.asarray([0.0, 2.0])
    params = PolicyParams(params, init_statistics(spec.observations))  # What the learner serves.
    observations = np.zeros((4096, 4), np.float32)
    behaviour = builder.make_policy(network, spec, evaluation=False)
    actions, extras = behaviour(params, jax.random.PRNGKey(1), observations, 0)
    share = float(np.mean(np.asarray(actions)))
    expected = 1.0 / (1.0 + math.exp(-2.0))  # pi(1) = sigmoid(2), about 0.88
    assert abs(share - expected) < 0.03
    np.testing.assert_allclose(
        extras["log_prob"], np.where(np.asarray(actions) == 1, math.log(expected), math.log(1 - expected)), rtol=1e-4
    )
    evaluation = builder.make_policy(network, spec, evaluation=True)
    actions, extras = evaluation(params, jax.random.PRNGKey(1), observations, 0)
    assert np.all(np.asarray(actions) == 1) and extras == {}


def test_configuration_mismatches_are_refused_before_anything_starts(tmp_path):
    from test_config import build

    from rl.experiments.validation import ConfigError

    with pytest.raises(ConfigError, match="network: 'mlp' builds q_values networks, but the agent needs policy_value"):
        build(["agent=ppo", "network=mlp"], tmp_path)
    with pytest.raises(ConfigError, match="agent: ppo acts with samples of its own policy.*policy=sample"):
        build(["agent=ppo", "policy=epsilon_greedy"], tmp_path)
    with pytest.raises(ConfigError, match="builds policy_value networks, but the agent needs q_values"):
        build(["agent=dqn", "network=policy_value_mlp"], tmp_path)
    with pytest.raises(ConfigError, match="num_minibatches"):
        build(["experiment=ppo_cartpole", "agent.num_minibatches=3"], tmp_path)
    with pytest.raises(ConfigError, match="max_queue_size"):
        build(["agent=ppo", "agent.max_queue_size=4"], tmp_path)
    experiment, _ = build(["experiment=ppo_cartpole"], tmp_path)
    assert experiment.builder.config.num_epochs == 20 and experiment.num_envs == 8


def _learn(preset, seed, run_dir, steps, threshold, *overrides):
    """The preset's full budget; only the final evaluation (the one asserted) is run."""
    start = time.perf_counter()
    result = run_train(
        [
            f"experiment={preset}",
            f"seed={seed}",
            f"eval_every={steps}",
            "checkpoint=false",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    print(
        f"{preset} seed {seed}: final {summary['final_eval_return']} after {summary['actor_steps']} actor steps, "
        f"run {summary['wall_time_s']:.1f} s, process {time.perf_counter() - start:.1f} s"
    )
    assert summary["actor_steps"] == steps
    assert summary["final_eval_return"] >= threshold, summary


@pytest.mark.reverb
def test_ppo_solves_cartpole(run_dir):
    """In the deterministic mode: the outcome is a fact of the code, not a draw."""
    _learn("ppo_cartpole", 0, run_dir, 100_000, 475.0, "launcher.deterministic=true")


@pytest.mark.reverb
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ppo_solves_cartpole_other_seeds(seed, run_dir):
    _learn("ppo_cartpole", seed, run_dir, 100_000, 475.0)


@pytest.mark.reverb
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_learns_pendulum(seed, run_dir):
    """Random play scores about -1,200."""
    _learn("ppo_pendulum", seed, run_dir, 200_000, -400.0)


@pytest.mark.reverb
@pytest.mark.slow
@pytest.mark.ray
def test_ppo_runs_under_ray(run_dir):
    """Two actors feed the queue from their own processes; the learner consumes it."""
    result = run_train(
        [
            "experiment=ppo_cartpole",
            "launcher=ray",
            "launcher.num_actors=2",
            "max_actor_steps=6000",
            "eval_every=3000",
            "eval_episodes=2",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["status"] == "finished" and summary["actor_steps"] == 6000
    # 16 envs x 32 steps per batch of 8 sequences: at least a batch's worth was learned from.
    assert summary["learner_steps"] >= 5


def test_distribution_helpers_match_distrax():
    import distrax

    from rl.networks.base import GaussianParams
    from rl.networks.base import entropy, log_prob, sample_with_log_prob

    logits = jnp.asarray([[0.3, -1.2, 2.0], [0.0, 0.0, 0.0]])
    actions = jnp.asarray([2, 1])
    categorical = distrax.Categorical(logits=logits)
    np.testing.assert_allclose(log_prob(logits, actions), categorical.log_prob(actions), rtol=1e-5)
    np.testing.assert_allclose(entropy(logits), categorical.entropy(), rtol=1e-5)
    gaussian = GaussianParams(loc=jnp.asarray([[0.5, -0.2]]), scale=jnp.asarray([[0.3, 1.5]]))
    normal = distrax.MultivariateNormalDiag(gaussian.loc, gaussian.scale)
    action, action_log_prob = sample_with_log_prob(gaussian, jax.random.PRNGKey(3))
    np.testing.assert_allclose(action_log_prob, normal.log_prob(action), rtol=1e-5)
    np.testing.assert_allclose(entropy(gaussian), normal.entropy(), rtol=1e-5)


def test_running_observation_statistics():
    """Two batches folded in (padding rows left out) give the mean and variance of all
    the real observations; normalised observations are clipped."""
    rng = np.random.default_rng(0)
    first, second = rng.normal(3.0, 2.0, (4, 5, 2)), rng.normal(-1.0, 0.5, (3, 5, 2))
    mask_first, mask_second = np.ones((4, 5)), np.ones((3, 5))
    mask_second[:, 3:] = 0.0  # Padding: must not count.
    second[:, 3:] = 1000.0
    statistics = init_statistics(specs.Array((2,), np.float32))
    statistics = update_statistics(statistics, jnp.asarray(first, jnp.float32), jnp.asarray(mask_first))
    statistics = update_statistics(statistics, jnp.asarray(second, jnp.float32), jnp.asarray(mask_second))
    real = np.concatenate([first.reshape(-1, 2), second[:, :3].reshape(-1, 2)])
    assert float(statistics.count) == len(real)
    np.testing.assert_allclose(statistics.mean, real.mean(axis=0), rtol=1e-4)
    np.testing.assert_allclose(statistics.variance, real.var(axis=0), rtol=1e-4)
    normalized = normalize_observations(statistics, jnp.asarray([[1000.0, real[0, 1]]]), 5.0)
    assert float(normalized[0, 0]) == 5.0
    assert float(normalized[0, 1]) == pytest.approx((real[0, 1] - real[:, 1].mean()) / real[:, 1].std(), rel=1e-3)


def test_continuous_actions_store_the_raw_sample_and_act_in_bounds():
    """Pendulum: the environment gets the sample clipped to [-1, 1] and rescaled to its
    bounds [-2, 2]; replay keeps the raw sample, whose log-probability is the stored one."""
    from rl.environments.factories import make_gymnasium_environment
    from rl.networks.base import log_prob, make_policy_value_network
    from rl.core import make_environment_spec

    spec = make_environment_spec(make_gymnasium_environment("Pendulum-v1", seed=0))
    network = make_policy_value_network(spec, (8,), (8,), initial_log_std=1.0)  # std e: many samples clip.
    params = PolicyParams(network.init(jax.random.PRNGKey(0)), init_statistics(spec.observations))
    builder = PPOBuilder(PPOConfig())
    observations = np.random.default_rng(0).normal(size=(512, 3)).astype(np.float32)
    actions, extras = builder.make_policy(network, spec, evaluation=False)(
        params, jax.random.PRNGKey(1), observations, 0
    )
    raw = np.asarray(extras["raw_action"])
    assert actions.shape == raw.shape == (512, 1) and np.abs(raw).max() > 1.0
    np.testing.assert_allclose(actions, 2.0 * np.clip(raw, -1.0, 1.0), atol=1e-6)
    output, _ = network.apply(params.params, observations)
    np.testing.assert_allclose(extras["log_prob"], log_prob(output, raw), rtol=1e-5)
    mode, _ = builder.make_policy(network, spec, evaluation=True)(params, jax.random.PRNGKey(1), observations, 0)
    np.testing.assert_allclose(mode, 2.0 * np.clip(np.asarray(output.loc), -1.0, 1.0), atol=1e-6)
