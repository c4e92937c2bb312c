"""R2D2 and the memory task: the masked CartPole, the LSTM Q-network, sequence items
with stored core states, value rescaling, the R2D2 loss on a hand-checkable batch, the
recurrent actor, priorities written back to a real reverb table, configuration refusals
and (some under -m slow) learning runs through the real entry point.
"""

from __future__ import annotations

import numpy as np

from conftest import read_summary, run_train
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
    from rl.core import make_environment_spec

    return make_environment_spec(make_masked_environment(seed=0))


def test_lstm_network_steps_and_unrolls_alike():
    """Acting (one step at a time, carrying the state) and learning (hk.dynamic_unroll over
    a sequence) compute the same Q-values and final state, dueling or not."""
    import jax

    from rl.networks.recurrent import make_recurrent_q_network

    observations = np.random.default_rng(0).normal(size=(6, 3, 2)).astype(np.float32)
    for dueling in (False, True):
        network = make_recurrent_q_network(
            masked_spec(), torso_kwargs={"hidden_sizes": [8]}, lstm_size=16, dueling=dueling
        )
        params = network.init(jax.random.PRNGKey(0))
        state = network.initial_state(3)
        assert {k: v.shape for k, v in state.items()} == {"cell": (3, 16), "hidden": (3, 16)}
        assert not any(v.any() for v in state.values())
        stepped = []
        apply = jax.jit(network.apply)
        for observation in observations:
            q_values, state = apply(params, observation, state)
            stepped.append(q_values)
        unrolled, final = network.unroll(params, observations, network.initial_state(3))
        assert unrolled.shape == (6, 3, 2)
        np.testing.assert_allclose(np.stack(stepped), unrolled, atol=1e-6)
        np.testing.assert_allclose(state["hidden"], final["hidden"], atol=1e-6)
        np.testing.assert_allclose(state["cell"], final["cell"], atol=1e-6)


# --------------------------------------------------------------------------- fixtures

import dm_env  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402
from dm_env import specs  # noqa: E402

from rl.core import EnvironmentSpec  # noqa: E402

COUNTER_SPEC = EnvironmentSpec(
    observations=specs.Array((2,), np.float32, "observation"),
    actions=specs.DiscreteArray(2, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)


class CounterEnvironment(dm_env.Environment):
    """Observation (episode index, step in episode); episodes of `length` steps, ended by a
    termination. Reward t + 1 at step t, so every stored row names where it came from."""

    def __init__(self, length: int):
        self._length = length
        self._episode = -1
        self._t = 0

    def _observation(self) -> np.ndarray:
        return np.asarray([self._episode, self._t], np.float32)

    def reset(self) -> dm_env.TimeStep:
        self._episode += 1
        self._t = 0
        return dm_env.restart(self._observation())

    def step(self, action) -> dm_env.TimeStep:
        self._t += 1
        reward = np.float32(self._t)
        if self._t == self._length:
            return dm_env.termination(reward, self._observation())
        return dm_env.transition(reward, self._observation(), np.float32(1.0))

    def observation_spec(self):
        return COUNTER_SPEC.observations

    def action_spec(self):
        return COUNTER_SPEC.actions


class FixedParams:
    """A variable client whose parameters never change (no learner in these tests)."""

    def __init__(self, params):
        self.params = params

    def update(self, wait: bool = False) -> None:
        del wait


class FixedVariableSource:
    """A variable source serving fixed parameters (a learner that never learns)."""

    def __init__(self, params):
        self._params = params

    def get_variables(self, names):
        return [self._params for _ in names]


def small_network(spec=COUNTER_SPEC, size: int = 4):
    from rl.networks.recurrent import make_recurrent_q_network

    return make_recurrent_q_network(spec, torso_kwargs={"hidden_sizes": [3]}, lstm_size=size)


def r2d2_builder(**overrides):
    from rl.agents.r2d2 import R2D2Config
    from rl.agents.r2d2.builder import R2D2Builder

    settings = dict(
        burn_in_length=2,
        trace_length=4,
        sequence_period=3,
        n_step=2,
        discount=0.9,
        batch_size=4,
        samples_per_insert=1000.0,
        min_replay_size=1,
        max_replay_size=1000,
        core_state_size=4,
        learning_rate=1e-3,
        variable_update_period=1,
    )
    settings.update(overrides)
    return R2D2Builder(R2D2Config(**settings))


def all_items(client, builder, count: int) -> dict[int, tuple[object, float]]:
    """Every item of the builder's table (key -> (SequenceStep, priority)), sampled until
    `count` are seen."""
    import tree

    from rl.replay.adders import step_spec

    layout = step_spec(COUNTER_SPEC, builder.extras_spec())
    found: dict[int, tuple[object, float]] = {}
    for _ in range(200):
        for sample in client.sample(builder.config.replay_table_name, num_samples=50, emit_timesteps=False):
            found[int(sample.info.key)] = (tree.unflatten_as(layout, sample.data), float(sample.info.priority))
        if len(found) == count:
            return found
    raise AssertionError(f"saw {len(found)} of {count} items")


# --------------------------------------------------------------------------- sequences


@pytest.mark.reverb
def test_sequence_items_overlap_pad_and_store_the_state_acted_from():
    """Items of burn-in 2 + trace 4 = 6 rows, a new one every 3 rows, from a 13-step episode
    and the start of the next, written by the builder's adder into its prioritized table
    on a real reverb server, fed by the recurrent actor.

    Episode 0 has rows 0..12 (steps) and 13 (its final observation): items start at rows
    0, 3, 6 and 9, the last holding rows 9..13 and one row of padding. Each item's stored
    core state is the LSTM state after the episode's earlier observations (zeros at an
    episode start), recomputed here by unrolling the network from zeros."""
    from rl.agents.actors import RecurrentActor
    from rl.environment_loop import EnvironmentLoop
    from rl.replay.server import make_server

    builder = r2d2_builder()
    network = small_network()
    params = network.init(jax.random.PRNGKey(1))
    server = make_server(builder.make_replay_tables(COUNTER_SPEC))
    try:
        client = __import__("reverb").Client(f"localhost:{server.port}")
        adder = builder.make_adder(client, COUNTER_SPEC)
        policy = builder.make_policy(network, COUNTER_SPEC, evaluation=False)
        actor = RecurrentActor(policy, jax.random.PRNGKey(0), FixedParams(params), adder, action_dtype=np.int32)
        loop = EnvironmentLoop(CounterEnvironment(13), actor)
        loop.run_steps(13 + 9)  # Episode 0, then 9 steps of episode 1 (items at rows 0 and 3).
        adder.reset()
        assert adder.num_items == 6
        items = all_items(client, builder, 6)
    finally:
        server.stop()

    apply = jax.jit(network.apply)
    by_start = {}
    for data, priority in items.values():
        assert priority == 1.0  # New items all start at priority 1.
        assert data.observation.shape == (6, 2) and data.extras["core_state"]["hidden"].shape == (6, 4)
        episode, start = int(data.observation[0, 0]), int(data.observation[0, 1])
        by_start[(episode, start)] = data
    assert sorted(by_start) == [(0, 0), (0, 3), (0, 6), (0, 9), (1, 0), (1, 3)]

    for (episode, start), data in by_start.items():
        steps = (13 if episode == 0 else 9) - start  # Rows that are steps taken.
        rows = min(6, steps + (1 if episode == 0 else 0))  # ... plus the final observation.
        np.testing.assert_array_equal(data.observation[:rows, 1], np.arange(start, start + rows))
        np.testing.assert_array_equal(data.observation[rows:], 0)  # Padding.
        np.testing.assert_array_equal(data.mask, [1.0 if i < min(6, steps) else 0.0 for i in range(6)])
        taken = min(6, steps)
        np.testing.assert_array_equal(data.reward[:taken], np.arange(start + 1, start + taken + 1))
        np.testing.assert_array_equal(data.reward[taken:], 0)
        if (episode, start) == (0, 9):  # The termination: discount 0 after the last step.
            np.testing.assert_array_equal(data.discount, [1, 1, 1, 0, 0, 0])
        # The state the actor acted from at the item's first row.
        state = network.initial_state(1)
        for t in range(start):
            _, state = apply(params, np.asarray([[episode, t]], np.float32), state)
        for name in ("cell", "hidden"):
            np.testing.assert_allclose(data.extras["core_state"][name][0], state[name][0], atol=1e-6)
            if start == 0:
                np.testing.assert_array_equal(data.extras["core_state"][name][0], 0.0)


# --------------------------------------------------------------------------- value rescaling and loss


def h(x, eps=1e-3):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x


def h_inverse(x, eps=1e-3):
    z = (np.sqrt(1.0 + 4.0 * eps * (np.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return np.sign(x) * (z**2 - 1.0)


def test_value_rescaling_round_trip():
    from rl.agents.r2d2.builder import rescale, unrescale

    x = np.asarray([-1e4, -250.0, -3.0, -1e-3, 0.0, 0.5, 1.0, 42.0, 500.0, 1e4], np.float64)
    # 64-bit floats for this block: jax.enable_x64(True) on current JAX, jax.experimental.enable_x64() on 0.4.
    x64 = jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64()
    with x64:
        np.testing.assert_allclose(np.asarray(rescale(jnp.asarray(x), 1e-3)), h(x), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(unrescale(rescale(jnp.asarray(x), 1e-3), 1e-3)), x, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(rescale(unrescale(jnp.asarray(x), 1e-3), 1e-3)), x, rtol=1e-9, atol=1e-9)
    # h(3) = sqrt(4) - 1 + 0.003 = 1.003; it shrinks large returns: h(500) ~ 21.4.
    assert float(rescale(jnp.float32(3.0), 1e-3)) == pytest.approx(1.003, abs=1e-6)
    assert float(rescale(jnp.float32(500.0), 1e-3)) == pytest.approx(np.sqrt(501.0) - 1.0 + 0.5, rel=1e-6)


def toy_batch(discount_2: float):
    """One item (batch of one) of burn-in 2 + trace 5 rows whose observations are the
    Q-values themselves (see `scaled_unroll`). Trace rows: steps at 0, 1, 2, the episode's
    final observation at 3 (mask 0) and padding at 4; d_2 = `discount_2` (1: time limit,
    0: termination)."""
    from rl.replay.adders import SequenceStep

    burn = [[9.0, -9.0], [7.0, 5.0]]
    trace = [[0.5, 1.0], [1.0, 2.0], [3.0, 1.0], [2.0, 4.0], [0.0, 0.0]]
    return SequenceStep(
        observation=jnp.asarray([burn + trace], jnp.float32),
        action=jnp.asarray([[1, 0, 0, 1, 1, 0, 0]], jnp.int32),
        reward=jnp.asarray([[100.0, 100.0, 1.0, 2.0, 3.0, 0.0, 0.0]], jnp.float32),
        discount=jnp.asarray([[1.0, 1.0, 1.0, 1.0, discount_2, 0.0, 0.0]], jnp.float32),
        mask=jnp.asarray([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]], jnp.float32),
        extras={"core_state": {"cell": jnp.zeros((1, 7, 1)), "hidden": jnp.zeros((1, 7, 1))}},
    )


def scaled_unroll(params, observations, state):
    """Q(o) = params["scale"] * o: Q-values a hand can check (the online network has scale
    1, the target network scale 2)."""
    return params["scale"] * observations, state


@pytest.mark.parametrize("discount_2", [1.0, 0.0])
def test_r2d2_loss_on_a_hand_checked_batch(discount_2):
    """gamma 0.5, n = 2, no rescaling. Double Q: the online network picks argmax o_{t+1}
    (rows 1, 2, 3: actions 1, 0, 1) and the target network values it: v = 2 * (2, 3, 4)
    = (4, 6, 8). The final observation at row 3 cuts the trace (lambda_2 = mask_3 = 0):

        G_0 = r_0 + g d_0 (r_1 + g d_1 v_2) = 1 + .5 (2 + .5 * 6)     = 3.5
        G_1 = r_1 + g d_1 (r_2 + g d_2 v_3) = 2 + .5 (3 + .5 * d_2 8) = 5.5 (d_2 = 1) or 3.5
        G_2 = r_2 + g d_2 v_3               = 3 + .5 d_2 8            = 7   (d_2 = 1) or 3

    Q(o_t, a_t) for actions (0, 1, 1): 0.5, 2, 1. The burn-in rows (large rewards) and
    rows 3-4 (no step taken) add nothing."""
    from rl.agents.r2d2.builder import n_step_double_q_targets, r2d2_loss

    batch = toy_batch(discount_2)
    online, target = {"scale": jnp.float32(1.0)}, {"scale": jnp.float32(2.0)}
    trace = jax.tree_util.tree_map(lambda x: x[0, 2:], batch)
    targets = n_step_double_q_targets(
        trace.observation, 2.0 * trace.observation, trace.reward, trace.discount, trace.mask, 0.5, 2, None
    )
    expected = [3.5, 5.5, 7.0] if discount_2 == 1.0 else [3.5, 3.5, 3.0]
    np.testing.assert_allclose(np.asarray(targets[:3]), expected, rtol=1e-6)
    td = np.asarray(expected) - np.asarray([0.5, 2.0, 1.0])
    loss, extras = r2d2_loss(online, target, scaled_unroll, batch, jnp.ones(1), 2, 0.5, 2, 0.9, None)
    assert float(loss) == pytest.approx(0.5 * np.sum(td**2), rel=1e-6)  # A sum over the trained rows (Acme).
    assert float(extras["priorities"][0]) == pytest.approx(
        0.9 * np.max(np.abs(td)) + 0.1 * np.mean(np.abs(td)), rel=1e-6
    )
    # Importance weights scale each item's loss; the priorities do not depend on them.
    weighted, weighted_extras = r2d2_loss(online, target, scaled_unroll, batch, jnp.full(1, 0.25), 2, 0.5, 2, 0.9, None)
    assert float(weighted) == pytest.approx(0.25 * float(loss), rel=1e-6)
    assert float(weighted_extras["priorities"][0]) == pytest.approx(float(extras["priorities"][0]), rel=1e-6)

    # With value rescaling the same returns are built from h^-1 of the target values and squashed by h.
    rescaled_targets = n_step_double_q_targets(
        trace.observation, 2.0 * trace.observation, trace.reward, trace.discount, trace.mask, 0.5, 2, 1e-3
    )
    v = h_inverse(np.asarray([4.0, 6.0, 8.0]))
    returns = [1 + 0.5 * (2 + 0.5 * v[1]), 2 + 0.5 * (3 + 0.5 * discount_2 * v[2]), 3 + 0.5 * discount_2 * v[2]]
    np.testing.assert_allclose(np.asarray(rescaled_targets[:3]), h(np.asarray(returns)), rtol=1e-5)


def test_burn_in_rows_get_no_gradient():
    """Through a real LSTM: the loss's gradient with respect to the observations is zero on
    the burn-in rows (they only warm the state up) and not on the trained rows."""
    from rl.agents.r2d2.builder import r2d2_loss
    from rl.networks.recurrent import make_recurrent_q_network

    # 16 torso units: with 3, every ReLU can be dead on these observations (JAX 0.10's initial weights are).
    network = make_recurrent_q_network(COUNTER_SPEC, torso_kwargs={"hidden_sizes": [16]}, lstm_size=4)
    params = network.init(jax.random.PRNGKey(0))
    batch = toy_batch(1.0)
    batch = batch._replace(extras={"core_state": {k: jnp.full((1, 7, 4), 0.1) for k in ("cell", "hidden")}})

    def loss_of_observations(observations):
        return r2d2_loss(
            params, params, network.unroll, batch._replace(observation=observations), jnp.ones(1), 2, 0.5, 2, 0.9, 1e-3
        )[0]

    gradient = np.asarray(jax.jit(jax.grad(loss_of_observations))(batch.observation))[0]
    np.testing.assert_array_equal(gradient[:2], 0.0)
    assert np.all(np.abs(gradient[2:5]).sum(axis=1) > 0)  # Every trained row with a step.
    # And the loss does not read the burn-in rows' rewards, actions or discounts.
    changed = batch._replace(reward=batch.reward.at[0, :2].set(-5.0), action=batch.action.at[0, :2].set(0))
    loss = jax.jit(lambda b: r2d2_loss(params, params, network.unroll, b, jnp.ones(1), 2, 0.5, 2, 0.9, 1e-3)[0])
    assert float(loss(changed)) == float(loss(batch))


# --------------------------------------------------------------------------- actor


def test_recurrent_actor_carries_its_state_and_resets_it_at_an_episode_start():
    """Two copies: both step twice; copy 1's episode then ends and restarts, so its state
    goes back to zeros while copy 0's carries on; a step of copy 0 alone leaves copy 1's
    state as it was. The adder-free actor still reports the states it acted from."""
    from rl.agents.actors import RecurrentActor

    builder = r2d2_builder()
    network = small_network()
    params = network.init(jax.random.PRNGKey(3))
    apply = jax.jit(network.apply)
    actor = RecurrentActor(
        builder.make_policy(network, COUNTER_SPEC, evaluation=True),
        jax.random.PRNGKey(0),
        FixedParams(params),
        action_dtype=np.int32,
    )
    observations = [np.asarray([[0, t], [10, t]], np.float32) for t in range(3)]
    first = dm_env.TimeStep(np.full(2, dm_env.StepType.FIRST), None, None, observations[0])
    actor.observe_first(first)
    expected = network.initial_state(2)
    for t in (0, 1):
        q_values, expected = apply(params, observations[t], expected)
        actions = actor.select_action(observations[t])
        np.testing.assert_array_equal(actions, np.argmax(np.asarray(q_values), axis=-1))  # Greedy.
        step_type = [dm_env.StepType.MID, dm_env.StepType.LAST if t == 1 else dm_env.StepType.MID]
        actor.observe(actions, dm_env.TimeStep(np.asarray(step_type), np.ones(2), np.ones(2), observations[t + 1]))
        for name in ("cell", "hidden"):
            np.testing.assert_allclose(actor.state[name], np.asarray(expected[name]), atol=1e-6)
    assert np.abs(actor.state["hidden"][1]).sum() > 0
    # Copy 1 starts a new episode: its state is reset, copy 0's is kept.
    kept = {name: actor.state[name][0].copy() for name in ("cell", "hidden")}
    actor.observe_first(dm_env.TimeStep(np.asarray([dm_env.StepType.FIRST]), None, None, observations[0][1:]), [1])
    for name in ("cell", "hidden"):
        np.testing.assert_array_equal(actor.state[name][1], 0.0)
        np.testing.assert_array_equal(actor.state[name][0], kept[name])
    # Only copy 0 steps: copy 1's fresh state must not move although an action was chosen for it.
    actor.select_action(np.asarray([[0, 2], [10, 0]], np.float32))
    actor.observe(
        np.zeros(1, np.int32),
        dm_env.TimeStep(np.asarray([dm_env.StepType.MID]), np.ones(1), np.ones(1), observations[0][:1]),
        [0],
    )
    _, advanced = apply(params, np.asarray([[0, 2]], np.float32), {name: kept[name][None] for name in kept})
    for name in ("cell", "hidden"):
        np.testing.assert_array_equal(actor.state[name][1], 0.0)
        np.testing.assert_allclose(actor.state[name][0], np.asarray(advanced[name][0]), atol=1e-6)


def test_ape_x_epsilons_per_actor():
    """epsilon_i = 0.4 ** (1 + 7 i / (N - 1)) with several actors; one actor (or the option
    off) keeps the policy group's schedule."""
    from rl.agents.r2d2 import R2D2Config

    config = R2D2Config(num_actors=4)
    assert [config.actor_epsilon_of(i) for i in range(4)] == pytest.approx(
        [0.4, 0.4 ** (1 + 7 / 3), 0.4 ** (1 + 14 / 3), 0.4**8]
    )
    assert R2D2Config(num_actors=1).actor_epsilon_of(0) is None
    assert R2D2Config(num_actors=4, per_actor_epsilon=False).actor_epsilon_of(2) is None
    builder = r2d2_builder(num_actors=3)
    network = small_network()
    params = network.init(jax.random.PRNGKey(0))
    observations = np.zeros((2000, 2), np.float32)
    state = network.initial_state(2000)
    greedy = np.argmax(np.asarray(network.apply(params, observations, state)[0]), axis=-1)
    for actor_id, epsilon in enumerate([0.4, 0.4**4.5, 0.4**8]):
        policy = builder.make_actor_policy(network, COUNTER_SPEC, actor_id)
        actions, _ = jax.jit(policy.step)(params, jax.random.PRNGKey(actor_id), observations, state, 0)
        # Random actions differ from the greedy one half the time (two actions).
        assert np.mean(np.asarray(actions) != greedy) == pytest.approx(epsilon / 2, abs=0.03)


# --------------------------------------------------------------------------- priorities


class Recorded:
    """Passes a real iterator's batches through, keeping each (to check what the learner saw)."""

    def __init__(self, iterator):
        self._iterator = iterator
        self.samples = []

    def __iter__(self):
        return self

    def __next__(self):
        sample = next(self._iterator)
        self.samples.append(sample)
        return sample


@pytest.mark.reverb
def test_learner_writes_priorities_back_to_the_table():
    """A learner step on the builder's dataset (real server, items from the real actor and
    adder) sets each sampled item's priority to eta * max + (1 - eta) * mean of its |TD|
    under the parameters it sampled with; unsampled items keep priority 1."""
    import reverb

    from rl.agents.r2d2.builder import r2d2_loss
    from rl.environment_loop import EnvironmentLoop
    from rl.replay.server import make_server
    from rl.systems.learning import PRIORITY_FLOOR, SGDLearner, importance_weights, normalized_weights

    builder = r2d2_builder(batch_size=4, max_replay_size=1000)
    network = small_network()
    server = make_server(builder.make_replay_tables(COUNTER_SPEC))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        adder = builder.make_adder(client, COUNTER_SPEC)
        params = network.init(jax.random.PRNGKey(1))
        policy = builder.make_policy(network, COUNTER_SPEC, evaluation=False)
        actor = builder.make_actor(jax.random.PRNGKey(0), policy, COUNTER_SPEC, FixedVariableSource(params), adder)
        EnvironmentLoop(CounterEnvironment(13), actor).run_steps(13 * 3)  # 3 episodes: 12 items.
        adder.reset()
        dataset = Recorded(builder.make_dataset_iterator(client, COUNTER_SPEC))
        learner = SGDLearner(builder.make_learning(network), jax.random.PRNGKey(2), dataset, client)
        before = learner.state
        learner.step()
        dataset._iterator.close()  # While the server is up: a stopped server's sampler retries forever.
        items = all_items(client, builder, 12)
    finally:
        server.stop()
    (sample,) = dataset.samples
    weights = normalized_weights(
        importance_weights(jnp.asarray(sample.probabilities), jnp.asarray(sample.table_size), 0.6)
    )
    _, extras = r2d2_loss(
        before.params, before.target_params, network.unroll, sample.data, weights, 2, 0.9, 2, 0.9, 1e-3
    )
    expected = dict(zip(sample.keys.tolist(), np.asarray(extras["priorities"], np.float64) + PRIORITY_FLOOR))
    assert len(expected) >= 1
    for key, (_, priority) in items.items():
        if key in expected:
            assert priority == pytest.approx(expected[key], rel=1e-5)
            assert priority != 1.0
        else:
            assert priority == 1.0


# --------------------------------------------------------------------------- configuration


def test_recurrent_networks_and_agents_go_together(tmp_path):
    """network=lstm with a feed-forward agent, or agent=r2d2 with a feed-forward network,
    is refused before anything is built; the pair composes."""
    from test_config import build

    from rl.experiments.validation import ConfigError

    with pytest.raises(
        ConfigError, match=r"network: 'lstm' builds recurrent_q networks, but the agent needs q_values.*agent=r2d2"
    ):
        build(["agent=dqn", "network=lstm"], tmp_path)
    with pytest.raises(
        ConfigError, match=r"network: 'mlp' builds q_values networks, but the agent needs recurrent_q.*network=lstm"
    ):
        build(["agent=r2d2", "network=mlp"], tmp_path)
    with pytest.raises(ConfigError, match="sequence_period"):
        build(["agent=r2d2", "agent.trace_length=10", "agent.sequence_period=10"], tmp_path)
    experiment, _ = build(["environment=cartpole_masked", "agent=r2d2", "network.lstm_size=32"], tmp_path)
    assert experiment.environment_name == "cartpole_masked" and experiment.environment_spec.observations.shape == (2,)
    assert experiment.builder.config.core_state_size == 32  # Read from the network group.
    assert experiment.builder.config.num_actors == 1
    experiment, _ = build(["agent=r2d2", "launcher=ray", "launcher.num_actors=3"], tmp_path)
    assert experiment.builder.config.num_actors == 3 and experiment.builder.config.actor_epsilon_of(2) == pytest.approx(
        0.4**8
    )


def test_a_mismatch_exits_2_with_one_line():
    result = run_train(["agent=dqn", "network=lstm"], timeout=120)
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1].startswith("Invalid configuration: network: 'lstm' builds recurrent_q")
    )
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- runs


def learn(run_dir, *overrides):
    result = run_train([*overrides, f"hydra.run.dir={run_dir}", "progress=false", "checkpoint=false"], timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return read_summary(str(run_dir))


@pytest.mark.reverb
def test_r2d2_runs_end_to_end_and_trains(tmp_path):
    """The masked preset for 4,000 steps: actors fill the prioritized table, the learner
    trains on it (learner steps as the replay ratio allows) and the run finishes."""
    summary = learn(
        tmp_path, "experiment=r2d2_cartpole_masked", "max_actor_steps=4000", "eval_every=2000", "eval_episodes=2"
    )
    assert summary["status"] == "finished" and summary["agent"] == "r2d2"
    assert summary["environment"] == "cartpole_masked" and summary["actor_steps"] == 4000
    assert summary["learner_steps"] > 0 and len(summary["eval_returns"]) == 3  # At 0, 2000 and 4000.


@pytest.mark.reverb
@pytest.mark.slow
def test_r2d2_learns_cartpole(tmp_path):
    """Issue 12: experiment=r2d2_cartpole seed=0 reaches at least 400 within 200,000 steps."""
    summary = learn(tmp_path, "experiment=r2d2_cartpole", "seed=0")
    assert summary["actor_steps"] == 200_000
    assert summary["final_eval_return"] >= 400, summary


@pytest.mark.reverb
@pytest.mark.slow
def test_r2d2_remembers_what_dqn_cannot_see(tmp_path):
    """Issue 12's memory task: on cartpole_masked (no velocities), with the same budget and
    seed, R2D2's final evaluation is at least twice feed-forward DQN's."""
    r2d2 = learn(tmp_path / "r2d2", "experiment=r2d2_cartpole_masked", "seed=0")
    dqn = learn(tmp_path / "dqn", "experiment=dqn_cartpole_masked", "seed=0")
    assert r2d2["actor_steps"] == dqn["actor_steps"] == 200_000
    assert r2d2["final_eval_return"] >= 2 * dqn["final_eval_return"], (r2d2, dqn)


@pytest.mark.reverb
@pytest.mark.slow
@pytest.mark.ray
def test_r2d2_under_ray_with_ape_x_epsilons(tmp_path):
    """Two Ray actors (epsilons 0.4 and 0.4 ** 8) feed one learner: the run finishes its
    budget and learns."""
    summary = learn(
        tmp_path, "experiment=r2d2_cartpole", "launcher=ray", "launcher.num_actors=2", "max_actor_steps=100000"
    )
    assert summary["status"] == "finished" and summary["actor_steps"] == 100_000
    assert summary["best_eval_return"] >= 200, summary
