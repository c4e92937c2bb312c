"""environment.backend=envpool: envpool's copies behind VectorEnvironment's interface."""

from __future__ import annotations

import dm_env
import jax
import numpy as np
import pytest

from test_config import build
from rl.environments.vector import EnvpoolVectorEnvironment
from rl.experiments.validation import ConfigError

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb


def whole_first_steps(actions, env_ids):
    """Observations of copies `env_ids` after their first step, in a fresh pool whose
    copies are all stepped (no subset), in the order of `env_ids`."""
    fresh = EnvpoolVectorEnvironment("CartPole-v1", seed=7, num_envs=4)
    fresh.reset()
    every = np.zeros(4, np.int64)
    every[list(env_ids)] = actions
    return fresh.step(every).observation[list(env_ids)]


def test_steps_any_subset_of_copies_in_the_order_asked():
    subset = EnvpoolVectorEnvironment("CartPole-v1", seed=7, num_envs=4)
    whole = EnvpoolVectorEnvironment("CartPole-v1", seed=7, num_envs=4)
    first = subset.reset()
    assert first.observation.dtype == np.float32 and first.observation.shape == (4, 4)
    np.testing.assert_array_equal(first.observation, whole.reset().observation)
    assert list(first.step_type) == [dm_env.StepType.FIRST] * 4
    # Copies 3 and 1 only (in that order) against every copy stepped with the same actions.
    partial = subset.step(np.array([1, 0]), env_ids=[3, 1])
    full = whole.step(np.array([0, 0, 1, 1]))
    np.testing.assert_array_equal(partial.observation, full.observation[[3, 1]])
    assert partial.reward.shape == (2,) and partial.reward.dtype == np.float32
    # Copies 0 and 2 were not stepped: their next step is their first, as in `whole`'s.
    again = subset.step(np.array([1, 1]), env_ids=[2, 0])
    np.testing.assert_array_equal(again.observation, whole_first_steps(np.array([1, 1]), [2, 0]))


def test_episodes_end_with_dm_env_discounts_and_reset_on_request():
    environment = EnvpoolVectorEnvironment("CartPole-v1", seed=0, num_envs=2, max_episode_steps=5)
    environment.reset()
    for t in range(5):  # Alternating pushes keep the pole up: the time limit ends it.
        timestep = environment.step(np.array([t % 2, t % 2]))
    assert list(timestep.step_type) == [dm_env.StepType.LAST] * 2
    assert list(timestep.discount) == [1.0, 1.0]  # Truncation: bootstrap on.
    restarted = environment.reset(env_ids=[1])
    assert list(restarted.step_type) == [dm_env.StepType.FIRST]
    environment.reset(env_ids=[0])
    falling = EnvpoolVectorEnvironment("CartPole-v1", seed=0, num_envs=1)
    falling.reset()
    for _ in range(200):  # Always pushing right: the pole falls well before 200 steps.
        timestep = falling.step(np.array([1]))
        if timestep.last():
            break
    assert timestep.last() and list(timestep.discount) == [0.0]  # Termination.


def test_an_experiment_with_the_envpool_backend_acts_through_it(tmp_path):
    from rl.environments.vector import EnvpoolVectorEnvironment as Envpool
    from rl.experiments.builders import make_environment

    experiment, _ = build(["environment.backend=envpool", "environment.num_envs=3"], tmp_path)
    environment = make_environment(experiment, jax.random.PRNGKey(0), experiment.num_envs, observers=())
    assert isinstance(environment, Envpool) and environment.num_envs == 3
    assert environment.observation_spec().shape == experiment.environment_spec.observations.shape


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["environment.backend=envpool", "environment=gymnasium", "environment.name=Taxi-v4"],
            "envpool has no task .Taxi-v4.",
        ),
        (["environment.backend=threads"], "must be one of \\['gymnasium', 'envpool'\\]"),
    ],
)
def test_what_envpool_cannot_step_is_a_configuration_error(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        build(overrides, tmp_path)
