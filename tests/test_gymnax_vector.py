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


# --------------------------------------------------------------------------- the 500-step limit

LIMIT = 500  # CartPole-v1's episode limit.


def balancing(observations: jax.Array) -> jax.Array:
    """Pushes towards where the pole falls: most CartPole episodes last until the time limit."""
    return (observations[..., 2] + observations[..., 3] > 0).astype(jnp.int32)


def test_cartpole_episodes_end_at_the_500_step_limit_in_the_compiled_copies():
    """Whatever gymnax counts in `step_env`'s done (0.0.9: the limit too; 1.x: terminations only), every
    episode ends by step 500: a termination before it (discount 0) or a truncation at exactly 500 steps
    (discount 1, return 500), and the copy starts over; an evaluation round never counts a 501st step."""
    from rl.systems.base import evaluate, rollout

    copies, steps = 8, 1200
    vector = GymnaxVector("CartPole-v1", copies)
    policy = lambda params, key, observations, step: (balancing(observations), {})
    run = jax.jit(lambda state, key: rollout(vector, policy, None, state, key, steps))
    _, trajectory = run(vector.reset(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    step = jax.tree_util.tree_map(np.asarray, trajectory.step)
    truncations = 0
    for copy in range(copies):
        ends = np.flatnonzero(step.done[:, copy])
        assert ends.size >= 2, f"copy {copy}: an episode ran past {LIMIT} steps"
        assert np.diff(np.concatenate([[-1], ends])).max() <= LIMIT
        for end in ends:
            length, truncated = int(step.episode_length[end, copy]), bool(step.truncated[end, copy])
            assert length <= LIMIT and truncated == (length == LIMIT)
            assert step.discount[end, copy] == (1.0 if truncated else 0.0)
            if truncated:
                assert step.episode_return[end, copy] == float(LIMIT)
            truncations += truncated
    assert truncations >= copies  # The policy balances: most episodes reach the limit.

    evaluation_policy = lambda params, key, observations, step: (balancing(observations), {})
    result = jax.jit(lambda key: evaluate(vector, evaluation_policy, None, key))(jax.random.PRNGKey(2))
    returns, lengths = np.asarray(result.returns), np.asarray(result.lengths)
    assert returns.max() == float(LIMIT) and lengths.max() == float(LIMIT)
    np.testing.assert_array_equal(returns, lengths)  # CartPole: 1 per step.


def test_cartpole_episodes_end_at_the_500_step_limit_through_the_dm_env_adapter():
    """GymnaxToDmEnv (launcher=local/ray): an episode is a termination before step 500 (discount 0) or a
    truncation at exactly step 500 (discount 1); the next step starts a new episode."""
    from rl.environments.gymnax_vector import GymnaxToDmEnv

    environment, truncations = GymnaxToDmEnv("CartPole-v1", seed=0), 0
    timestep = environment.reset()
    for _ in range(4):
        length = 0
        while not timestep.last():
            assert length < LIMIT, f"the episode ran past {LIMIT} steps"
            timestep, length = environment.step(int(balancing(np.asarray(timestep.observation)))), length + 1
        assert length == LIMIT or timestep.discount == 0.0
        if length == LIMIT:
            assert timestep.discount == 1.0
            truncations += 1
        timestep = environment.step(0)
        assert timestep.first()
    assert truncations >= 2
