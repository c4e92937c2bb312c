import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.agents.dqn import DQNConfig
from rl.agents.dqn.builder import double_q_loss
from rl.core import Transition


def test_double_q_loss_on_a_tiny_batch():
    # A "network" that looks up Q-values from a table indexed by the observation.
    table_online = jnp.array([[1.0, 2.0], [3.0, 0.5]])
    table_target = jnp.array([[10.0, 20.0], [4.0, 8.0]])

    def apply(params, observation):
        return params[observation[:, 0]]

    batch = Transition(
        observation=jnp.array([[0], [1]]),
        action=jnp.array([1, 0]),
        reward=jnp.array([1.0, 2.0]),
        discount=jnp.array([0.5, 0.0]),
        next_observation=jnp.array([[1], [0]]),
    )
    loss, extras = double_q_loss(table_online, table_target, apply, batch, jnp.ones(2), huber_loss_delta=1.0)
    # Item 0: online argmax at obs 1 is action 0; target values it 4 -> target 1 + 0.5*4 = 3; q = 2; td = 1.
    # Item 1: discount 0 -> target 2; q = 3; td = -1. Huber(1) with delta 1 = 0.5 each.
    np.testing.assert_allclose(extras["abs_td_error"], [1.0, 1.0])
    assert float(loss) == pytest.approx(0.5)


def test_the_loss_is_huber_quadratic_inside_delta_and_linear_beyond():
    # One action, reward 0 and no bootstrap (discount 0): the td error is -Q(s, a) = -q.
    def loss(q, delta):
        batch = Transition(jnp.zeros((1, 1)), jnp.array([0]), jnp.zeros(1), jnp.zeros(1), jnp.zeros((1, 1)))
        apply = lambda params, observation: jnp.broadcast_to(params, (1, 1))
        return double_q_loss(q, q, apply, batch, jnp.ones(1), delta)[0]

    # delta 1: 0.5 x^2 for |x| <= 1, |x| - 0.5 beyond; gradients bounded by delta.
    x = jnp.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    np.testing.assert_allclose(jax.vmap(lambda v: loss(v, 1.0))(x), [2.5, 0.125, 0.0, 0.125, 2.5])
    np.testing.assert_allclose(jax.vmap(jax.grad(lambda v: loss(v, 1.0)))(x), [-1.0, -0.5, 0.0, 0.5, 1.0])
    assert float(loss(3.0, 2.0)) == 2.0 + 2.0 * 1.0


def test_loss_gradient_moves_q_towards_target():
    def apply(params, observation):
        return jnp.broadcast_to(params, (observation.shape[0], 2))

    params = jnp.array([0.0, 0.0])
    batch = Transition(jnp.zeros((1, 1)), jnp.array([0]), jnp.array([1.0]), jnp.array([0.0]), jnp.zeros((1, 1)))
    grad = jax.grad(lambda p: double_q_loss(p, p, apply, batch, jnp.ones(1), 1.0)[0])(params)
    assert grad[0] < 0 and grad[1] == 0


@pytest.mark.parametrize("field,value", [("batch_size", 0), ("n_step", -1), ("discount", 1.5)])
def test_config_rejects_out_of_range_values(field, value):
    with pytest.raises(ValueError, match=field):
        DQNConfig(**{field: value})


def test_importance_weights_are_n_p_to_the_minus_beta_normalised_within_the_minibatch():
    import jax.numpy as jnp

    from rl.core import Batch
    from rl.systems.learning import importance_weights, normalized_weights

    weights = importance_weights(jnp.array([0.5, 0.25, 0.125]), jnp.array([4, 4, 4]), 0.5)
    np.testing.assert_allclose(weights, [2**-0.5, 1.0, 2**0.5], rtol=1e-6)
    np.testing.assert_allclose(normalized_weights(weights), [0.5, 2**-0.5, 1.0], rtol=1e-6)
    assert np.array_equal(Batch.uniform(jnp.zeros((3, 2))).importance_weights, np.ones(3, np.float32))
