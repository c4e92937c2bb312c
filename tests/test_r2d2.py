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
