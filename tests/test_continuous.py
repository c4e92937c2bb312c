"""Unit tests of the continuous-control agents: targets, temperature, rescaling, policies, learners."""

import dataclasses

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dm_env import specs

from rl.agents import continuous
from rl.agents.d4pg import D4PGConfig
from rl.agents.d4pg import make_builder as make_d4pg
from rl.agents.d4pg.builder import projected_target
from rl.systems.learning import SGDLearner
from rl.agents.sac import SACConfig
from rl.agents.sac import make_builder as make_sac
from rl.agents.sac.builder import temperature_loss
from rl.agents.td3 import TD3Config
from rl.agents.td3 import make_builder as make_td3
from rl.environments import make_dm_control_environment, make_gymnasium_environment, make_mujoco_environment
from rl.networks import GaussianParams, make_actor_critic_networks
from rl.policies import Deterministic, GaussianNoise, Stochastic
from rl.replay import ReplaySample
from rl.core import make_environment_spec, Transition


@pytest.fixture(scope="module")
def pendulum_spec():
    return make_environment_spec(make_gymnasium_environment("Pendulum-v1", seed=0))


# ------------------------------------------------------------------ critic targets


def test_twin_critic_target_takes_the_smaller_critic():
    next_q = jnp.array([[1.0, 5.0, -2.0], [3.0, 4.0, -1.0]])  # (critics, batch)
    reward = jnp.array([1.0, 0.0, 2.0])
    discount = jnp.array([0.5, 1.0, 0.0])
    target = continuous.twin_critic_target(reward, discount, next_q)
    np.testing.assert_allclose(target, [1.0 + 0.5 * 1.0, 4.0, 2.0])


def test_twin_critic_target_subtracts_the_entropy_term():
    next_q = jnp.array([[2.0], [1.0]])
    target = continuous.twin_critic_target(
        jnp.array([0.0]), jnp.array([1.0]), next_q, next_log_prob=jnp.array([-3.0]), entropy_temperature=0.5
    )
    np.testing.assert_allclose(target, [1.0 + 0.5 * 3.0])


def test_twin_critic_target_has_no_gradient():
    grad = jax.grad(lambda q: continuous.twin_critic_target(jnp.ones(1), jnp.ones(1), q).sum())(jnp.ones((2, 1)))
    np.testing.assert_allclose(grad, 0.0)


def test_distributional_projection_conserves_mass():
    atoms = jnp.linspace(-10.0, 10.0, 21)
    logits = jax.random.normal(jax.random.PRNGKey(0), (6, 21))
    reward = jnp.array([0.0, 1.3, -4.7, 25.0, -30.0, 0.5])
    discount = jnp.array([0.99, 0.9, 0.5, 0.99, 0.99, 0.0])
    target = projected_target(atoms, reward, discount, logits)
    assert target.shape == (6, 21)
    assert jnp.all(target >= 0.0)
    np.testing.assert_allclose(target.sum(axis=-1), 1.0, atol=1e-5)


def test_distributional_projection_clips_to_the_support():
    atoms = jnp.linspace(-10.0, 10.0, 21)
    logits = jnp.zeros((2, 21))
    target = projected_target(atoms, jnp.array([100.0, -100.0]), jnp.array([0.5, 0.5]), logits)
    np.testing.assert_allclose(target[0], jax.nn.one_hot(20, 21), atol=1e-6)  # All mass on v_max.
    np.testing.assert_allclose(target[1], jax.nn.one_hot(0, 21), atol=1e-6)  # All mass on v_min.


def test_distributional_projection_of_a_terminal_reward_between_atoms():
    atoms = jnp.linspace(0.0, 4.0, 5)
    target = projected_target(atoms, jnp.array([2.25]), jnp.array([0.0]), jnp.zeros((1, 5)))
    np.testing.assert_allclose(target[0], [0.0, 0.0, 0.75, 0.25, 0.0], atol=1e-6)
    # The projected distribution keeps the mean of the target.
    assert float(jnp.sum(target[0] * atoms)) == pytest.approx(2.25)


# ------------------------------------------------------------------ entropy temperature


@pytest.mark.parametrize("entropy,rises", [(-3.0, True), (2.0, False)])
def test_temperature_moves_towards_the_target_entropy(entropy, rises):
    target_entropy = -1.0
    log_prob = jnp.full((32,), -entropy)  # The policy's entropy estimate is -E[log pi].
    log_temperature = jnp.array(0.0)
    optimizer = optax.adam(1e-2)
    grad = jax.grad(temperature_loss)(log_temperature, log_prob, target_entropy)
    updates, _ = optimizer.update(grad, optimizer.init(log_temperature))
    new = optax.apply_updates(log_temperature, updates)
    assert (float(new) > 0.0) == rises


# ------------------------------------------------------------------ action rescaling


def test_action_rescaling_round_trip():
    spec = specs.BoundedArray((3,), np.float32, minimum=[-2.0, 0.0, -0.4], maximum=[2.0, 10.0, 0.4])
    network_action = jax.random.uniform(jax.random.PRNGKey(1), (100, 3), minval=-1.0, maxval=1.0)
    environment_action = continuous.to_environment_scale(network_action, spec)
    assert environment_action.dtype == jnp.float32
    assert jnp.all(environment_action >= spec.minimum) and jnp.all(environment_action <= spec.maximum)
    np.testing.assert_allclose(continuous.to_network_scale(environment_action, spec), network_action, atol=1e-5)
    np.testing.assert_allclose(continuous.to_environment_scale(-jnp.ones(3), spec), spec.minimum)
    np.testing.assert_allclose(continuous.to_environment_scale(jnp.ones(3), spec), spec.maximum)
    np.testing.assert_allclose(continuous.to_environment_scale(jnp.zeros(3), spec), [0.0, 5.0, 0.0])


def test_rescaling_refuses_unbounded_or_discrete_actions():
    with pytest.raises(ValueError, match="finite"):
        continuous.action_bounds(specs.BoundedArray((1,), np.float32, -np.inf, np.inf))
    with pytest.raises(ValueError, match="continuous"):
        continuous.action_bounds(specs.DiscreteArray(3))


# ------------------------------------------------------------------ policies


def test_policy_heads_act_in_the_unit_box():
    key = jax.random.PRNGKey(0)
    mean = jnp.array([0.9, -0.9, 0.0])
    noisy = GaussianNoise(sigma=0.5)(mean, key, jnp.array(10))
    assert noisy.shape == (3,) and jnp.all(jnp.abs(noisy) <= 1.0) and not jnp.allclose(noisy, mean)
    np.testing.assert_allclose(Deterministic()(mean, key, 0), mean)
    gaussian = GaussianParams(loc=jnp.array([0.3, -5.0]), scale=jnp.array([0.5, 0.5]))
    np.testing.assert_allclose(Deterministic()(gaussian, key, 0), jnp.tanh(gaussian.loc))
    sample = Stochastic()(gaussian, key, 0)
    assert sample.shape == (2,) and jnp.all(jnp.abs(sample) <= 1.0)


def test_warmup_acts_uniformly_then_follows_the_policy():
    head = GaussianNoise(sigma=0.0, warmup_steps=100)
    mean = jnp.full((4,), 0.5)
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    warm = jax.vmap(lambda k: head(mean, k, jnp.array(50)))(keys)
    assert float(warm.std()) > 0.4 and jnp.all(jnp.abs(warm) <= 1.0)  # Uniform on [-1, 1]: std 0.577.
    np.testing.assert_allclose(head(mean, keys[0], jnp.array(100)), mean)


def test_stochastic_policy_needs_a_stochastic_agent():
    with pytest.raises(ValueError, match="gaussian_noise"):
        make_td3(exploration=Stochastic())
    with pytest.raises(ValueError, match="stochastic"):
        Stochastic()(jnp.zeros(2), jax.random.PRNGKey(0), 0)


@pytest.mark.parametrize("evaluation", [False, True])
@pytest.mark.parametrize("make_builder", [make_sac, make_td3, make_d4pg], ids=["sac", "td3", "d4pg"])
def test_policies_return_environment_scale_actions(pendulum_spec, make_builder, evaluation):
    builder = make_builder()
    networks = make_actor_critic_networks(pendulum_spec, (16,), (16,))
    policy = builder.make_policy(networks, pendulum_spec, evaluation=evaluation)
    params = networks.policy_network(builder.stochastic_policy).init(jax.random.PRNGKey(0))
    observations = np.zeros((4, 3), np.float32)  # A batch: one row per environment copy.
    actions = [np.asarray(policy(params, jax.random.PRNGKey(i), observations, 5000)) for i in range(20)]
    assert all(a.shape == (4, 1) and a.dtype == np.float32 and np.all(np.abs(a) <= 2.0) for a in actions)
    assert (len({float(a[0, 0]) for a in actions}) == 1) == evaluation  # Evaluation is deterministic.
    assert evaluation == all(np.all(a == a[0]) for a in actions)  # Exploration noise differs per row.


# ------------------------------------------------------------------ learners


def _fake_iterator(spec, batch_size, seed=0):
    rng = np.random.default_rng(seed)

    def sample():
        data = Transition(
            observation=rng.normal(size=(batch_size, 3)).astype(np.float32),
            action=rng.uniform(-2.0, 2.0, (batch_size, 1)).astype(np.float32),
            reward=rng.normal(size=batch_size).astype(np.float32),
            discount=np.full(batch_size, 0.99, np.float32),
            next_observation=rng.normal(size=(batch_size, 3)).astype(np.float32),
        )
        return ReplaySample(
            np.arange(batch_size), np.ones(batch_size, np.float32), np.zeros(batch_size, np.int32), data
        )

    while True:
        yield sample()


LEARNERS = [
    (make_sac, SACConfig),
    (make_td3, TD3Config),
    (make_d4pg, lambda **kw: D4PGConfig(num_atoms=11, **kw)),
]


def _learner(make_builder, config, networks, iterator):
    builder = make_builder(**dataclasses.asdict(config))
    return SGDLearner(builder.make_learning(networks), jax.random.PRNGKey(0), iterator)


@pytest.mark.parametrize("make_builder,config_class", LEARNERS, ids=["sac", "td3", "d4pg"])
def test_learner_step_runs_fused_sgd_steps(pendulum_spec, make_builder, config_class):
    config = config_class(batch_size=8, sgd_steps_per_learner_step=4)
    networks = make_actor_critic_networks(pendulum_spec, (16,), (16,))
    learner = _learner(make_builder, config, networks, _fake_iterator(pendulum_spec, 32))
    before = learner.get_variables(["policy"])[0]
    learner.step()
    learner.step()
    state = learner.save()
    assert int(state.steps) == 8
    after = learner.get_variables(["policy"])[0]
    changed = jax.tree_util.tree_map(lambda a, b: bool(jnp.any(a != b)), before, after)
    assert all(jax.tree_util.tree_leaves(changed))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(state))
    learner.restore(state)
    assert int(learner.save().steps) == 8


def test_td3_delays_policy_and_target_updates(pendulum_spec):
    config = TD3Config(batch_size=8, policy_delay=2)
    networks = make_actor_critic_networks(pendulum_spec, (16,), (16,))
    learner = _learner(make_td3, config, networks, _fake_iterator(pendulum_spec, 8))
    initial = learner.save()
    learner.step()  # Step 1: critic only.
    first = learner.save()
    same = lambda a, b: all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda x, y: bool(jnp.all(x == y)), a, b)))
    assert same(initial.policy_params, first.policy_params)
    assert same(initial.target_critic_params, first.target_critic_params)
    assert not same(initial.critic_params, first.critic_params)
    learner.step()  # Step 2: policy and targets move too.
    second = learner.save()
    assert not same(first.policy_params, second.policy_params)
    assert not same(first.target_policy_params, second.target_policy_params)
    assert not same(first.target_critic_params, second.target_critic_params)


def test_sac_default_target_entropy_is_minus_action_size():
    from rl.agents.sac.builder import target_entropy

    assert target_entropy(SACConfig(), 6) == -6.0
    assert target_entropy(SACConfig(target_entropy=-2.5), 6) == -2.5


@pytest.mark.parametrize(
    "config_class,field,value",
    [
        (SACConfig, "tau", 0.0),
        (SACConfig, "initial_temperature", -1.0),
        (TD3Config, "policy_delay", 0),
        (D4PGConfig, "v_min", 200.0),
        (D4PGConfig, "num_atoms", 1),
        (TD3Config, "batch_size", 0),
    ],
)
def test_configs_reject_out_of_range_values(config_class, field, value):
    with pytest.raises(ValueError, match=field):
        config_class(**{field: value})


# ------------------------------------------------------------------ environments


@pytest.mark.reverb
def test_dm_control_observations_are_one_float32_vector():
    environment = make_dm_control_environment(seed=0, domain="walker", task="walk", max_episode_steps=3)
    spec = make_environment_spec(environment)
    assert spec.observations.shape == (24,) and spec.observations.dtype == np.float32
    assert spec.actions.shape == (6,) and spec.actions.dtype == np.float32
    timestep = environment.reset()
    assert timestep.first() and timestep.observation.shape == (24,) and timestep.observation.dtype == np.float32
    for _ in range(3):
        timestep = environment.step(np.zeros(6, np.float32))
    assert timestep.last() and timestep.discount == 1.0 and timestep.reward.dtype == np.float32
    assert environment.step(np.zeros(6, np.float32)).first()  # Stepping after the end restarts.


@pytest.mark.reverb
def test_dm_control_and_mujoco_refuse_unknown_tasks():
    with pytest.raises(ValueError, match="walk"):
        make_dm_control_environment(seed=0, domain="walker", task="fly")
    with pytest.raises(ValueError, match="domains"):
        make_dm_control_environment(seed=0, domain="nope", task="run")
    with pytest.raises(ValueError, match="MuJoCo"):
        make_mujoco_environment(seed=0, name="CartPole-v1")


@pytest.mark.reverb
def test_mujoco_spec_is_float32_and_bounded():
    environment = make_mujoco_environment(seed=0, name="Hopper-v5")
    spec = make_environment_spec(environment)
    assert spec.observations.dtype == np.float32 and spec.actions.shape == (3,)
    timestep = environment.reset()
    timestep = environment.step(np.zeros(3, np.float32))
    assert isinstance(timestep, dm_env.TimeStep) and timestep.observation.dtype == np.float32
