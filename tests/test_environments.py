import dm_env
import gymnasium
import numpy as np
import pytest
from dm_env import specs

from rl.environments import GymnasiumToDmEnv, make_gymnasium_environment
from rl.environments.wrappers import EpisodeStatisticsWrapper
from rl.specs import is_discrete, make_environment_spec


def test_cartpole_spec_is_float32_with_discrete_actions():
    spec = make_environment_spec(make_gymnasium_environment("CartPole-v1", seed=0))
    assert spec.observations.shape == (4,) and spec.observations.dtype == np.float32
    assert is_discrete(spec.actions) and spec.actions.num_values == 2
    assert spec.discounts.dtype == np.float32


def test_pendulum_actions_are_bounded_continuous():
    spec = make_environment_spec(make_gymnasium_environment("Pendulum-v1", seed=0))
    assert isinstance(spec.actions, specs.BoundedArray) and not is_discrete(spec.actions)
    np.testing.assert_allclose(spec.actions.minimum, [-2.0])
    np.testing.assert_allclose(spec.actions.maximum, [2.0])


def _run_to_end(environment, action=0):
    timestep = environment.reset()
    assert timestep.first()
    steps = 0
    while not timestep.last():
        timestep = environment.step(action)
        steps += 1
    return timestep, steps


def test_termination_has_discount_zero():
    # Pushing left forever topples the pole: a true termination.
    timestep, steps = _run_to_end(make_gymnasium_environment("CartPole-v1", seed=0))
    assert steps < 500
    assert timestep.step_type == dm_env.StepType.LAST and timestep.discount == 0.0


def test_truncation_has_discount_one():
    environment = make_gymnasium_environment("CartPole-v1", seed=0, max_episode_steps=5)
    timestep, steps = _run_to_end(environment)
    assert steps == 5 and timestep.discount == 1.0 and timestep.last()


def test_step_after_last_starts_a_new_episode():
    environment = make_gymnasium_environment("CartPole-v1", seed=0, max_episode_steps=2)
    _run_to_end(environment)
    assert environment.step(0).first()


def test_same_seed_same_trajectory_different_seed_differs():
    def observations(seed):
        environment = make_gymnasium_environment("CartPole-v1", seed=seed)
        first = environment.reset().observation
        second = environment.reset().observation  # Later resets continue the seeded stream.
        return np.concatenate([first, second])

    np.testing.assert_array_equal(observations(7), observations(7))
    assert not np.array_equal(observations(7), observations(8))
    assert not np.array_equal(observations(2**32 - 1), observations(7))


def test_unknown_id_names_close_matches():
    with pytest.raises(ValueError, match="CartPole-v1"):
        make_gymnasium_environment("CartPol-v1", seed=0)


def test_episode_statistics_wrapper():
    environment = EpisodeStatisticsWrapper(GymnasiumToDmEnv(gymnasium.make("CartPole-v1"), seed=3))
    _, steps = _run_to_end(environment)
    assert environment.last_episode["episode_length"] == steps
    assert environment.last_episode["episode_return"] == pytest.approx(float(steps))
