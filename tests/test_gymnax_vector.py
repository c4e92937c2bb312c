"""rl/environments/gymnax_vector.py: an episode end at the time limit is a truncation
only when the environment did not terminate on that step (termination wins)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rl.environments.gymnax_vector import GymnaxVector, VectorState, single_step

# Past CartPole's 12-degree threshold (0.2094 rad): the pole has fallen whatever the action.
FALLEN = 0.3


def _cartpole_at_last_step(vector: GymnaxVector, thetas: list[float]) -> VectorState:
    """Copies of CartPole one step before the 500-step limit, copy i at angle thetas[i]."""
    state = vector.reset(jax.random.PRNGKey(0))
    limit = vector.params.max_steps_in_episode
    env_state = state.env_state.replace(
        theta=jnp.asarray(thetas, jnp.float32),
        theta_dot=jnp.zeros(len(thetas), jnp.float32),
        time=jnp.full(len(thetas), limit - 1, jnp.int32),
    )
    return state._replace(env_state=env_state)


def test_a_termination_on_the_last_allowed_step_is_not_a_truncation():
    """Copy 0's pole falls on step 500 (a termination: discount 0); copy 1 is upright at
    step 500 (the time limit alone: a truncation, discount 1)."""
    vector = GymnaxVector("CartPole-v1", 2)
    state = _cartpole_at_last_step(vector, [FALLEN, 0.0])
    _, step = jax.jit(vector.step)(state, jnp.zeros(2, jnp.int32), jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(step.done), [True, True])
    np.testing.assert_array_equal(np.asarray(step.truncated), [False, True])
    np.testing.assert_array_equal(np.asarray(step.discount), [0.0, 1.0])


def test_single_step_says_terminated_at_the_limit_for_the_dm_env_adapter():
    """`single_step` (what GymnaxToDmEnv steps with) on one copy, both cases."""
    vector = GymnaxVector("CartPole-v1", 1)
    for theta, truncated in ((FALLEN, False), (0.0, True)):
        env_state = jax.tree_util.tree_map(lambda x: x[0], _cartpole_at_last_step(vector, [theta]).env_state)
        _, _, _, done, was_truncated = single_step(
            vector.environment, vector.params, jax.random.PRNGKey(2), env_state, jnp.int32(1)
        )
        assert bool(done) and bool(was_truncated) == truncated
