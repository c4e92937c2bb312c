"""R2D2 and the memory task: the masked CartPole, the LSTM Q-network, sequence items
with stored core states, value rescaling, the R2D2 loss on a hand-checkable batch, the
recurrent actor, priorities written back to a real reverb table, configuration refusals
and (some under -m slow) learning runs through the real entry point.
"""

from __future__ import annotations

import numpy as np

from rl.environments import make_gymnasium_environment
from rl.environments.masked import make_masked_environment


def test_masked_cartpole_shows_position_and_angle_only():
    masked = make_masked_environment(seed=3)
    full = make_gymnasium_environment("CartPole-v1", 3)
    spec = masked.observation_spec()
    assert spec.shape == (2,) and spec.dtype == np.float32
    np.testing.assert_array_equal(spec.maximum, full.observation_spec().maximum[[0, 2]])
    timesteps = [(masked.reset(), full.reset())]
    for action in [1, 1, 0, 1, 0, 0, 1]:
        timesteps.append((masked.step(action), full.step(action)))
    for seen, state in timesteps:
        assert seen.observation.shape == (2,)
        np.testing.assert_array_equal(seen.observation, state.observation[[0, 2]])
        assert seen.reward == state.reward and seen.step_type == state.step_type


def masked_spec():
    from rl.specs import make_environment_spec

    return make_environment_spec(make_masked_environment(seed=0))


def test_lstm_network_steps_and_unrolls_alike():
    """Acting (one step at a time, carrying the state) and learning (hk.dynamic_unroll over
    a sequence) compute the same Q-values and final state, dueling or not."""
    import jax

    from rl.networks.recurrent import make_recurrent_q_network

    observations = np.random.default_rng(0).normal(size=(6, 3, 2)).astype(np.float32)
    for dueling in (False, True):
        network = make_recurrent_q_network(masked_spec(), torso_kwargs={"hidden_sizes": [8]}, lstm_size=16, dueling=dueling)
        params = network.init(jax.random.PRNGKey(0))
        state = network.initial_state(3)
        assert {k: v.shape for k, v in state.items()} == {"cell": (3, 16), "hidden": (3, 16)}
        assert not any(v.any() for v in state.values())
        stepped = []
        for observation in observations:
            q_values, state = network.apply(params, observation, state)
            stepped.append(q_values)
        unrolled, final = network.unroll(params, observations, network.initial_state(3))
        assert unrolled.shape == (6, 3, 2)
        np.testing.assert_allclose(np.stack(stepped), unrolled, atol=1e-6)
        np.testing.assert_allclose(state["hidden"], final["hidden"], atol=1e-6)
        np.testing.assert_allclose(state["cell"], final["cell"], atol=1e-6)
