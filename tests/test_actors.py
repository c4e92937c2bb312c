"""FeedForwardActor's deferred adder: the adder's calls of a step are made during the
next policy call, in the same order and with the same arguments, and the actions, the
random key and the step count are what an actor without deferral produces."""

from __future__ import annotations

import time

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl.agents.actors import FeedForwardActor
from rl.environment_loop import EnvironmentLoop
from rl.environments.vector import VectorEnvironment
from rl.core import VariableClient


class Walk(dm_env.Environment):
    """Observation [seed, t]; episodes of 3 + seed % 3 steps; reward t."""

    def __init__(self, seed: int):
        self.seed = seed
        self._t = 0

    def reset(self):
        self._t = 0
        return dm_env.restart(np.array([self.seed, 0], np.float32))

    def step(self, action):
        self._t += 1
        observation = np.array([self.seed, self._t], np.float32)
        if self._t == 3 + self.seed % 3:
            return dm_env.termination(np.float32(self._t), observation)
        return dm_env.transition(np.float32(self._t), observation)

    def observation_spec(self):
        return specs.Array((2,), np.float32, "observation")

    def action_spec(self):
        return specs.DiscreteArray(4, name="action")


class Recorder:
    """An adder that records its calls (name, env ids, actions, observations)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.num_items = 0

    def add_first(self, timestep, env_ids=None):
        ids = None if env_ids is None else [int(i) for i in env_ids]
        self.calls.append(("add_first", ids, None, timestep.observation.tolist()))

    def add(self, actions, next_timestep, env_ids=None):
        ids = None if env_ids is None else [int(i) for i in env_ids]
        self.calls.append(("add", ids, np.asarray(actions).tolist(), next_timestep.observation.tolist()))
        self.num_items += len(next_timestep.step_type)


class Source:
    def get_variables(self, keys):
        return [{"w": jnp.ones((2, 4))}]


def policy(params, key, observations, step):
    """Random actions, shifted by the step count (so the schedule's input shows)."""
    noise = jax.random.randint(key, observations.shape[:1], 0, 4)
    greedy = jnp.argmax(observations @ params["w"], axis=-1)
    return ((noise + greedy + step) % 4).astype(jnp.int32)


def make_loop(defer: bool, num_envs: int = 3) -> tuple[EnvironmentLoop, Recorder]:
    adder = Recorder()
    actor = FeedForwardActor(
        policy, jax.random.PRNGKey(7), VariableClient(Source()), adder, action_dtype=np.int32, defer_adder=defer
    )
    environment = VectorEnvironment([Walk(seed) for seed in range(num_envs)])
    return EnvironmentLoop(environment, actor), adder


def test_deferred_calls_are_the_immediate_calls_one_step_later():
    immediate, immediate_adder = make_loop(defer=False)
    deferred, deferred_adder = make_loop(defer=True)
    for _ in range(20):
        immediate.step()
        deferred.step()
        # The deferred adder has every call but the last step's (made in the next step).
        assert deferred_adder.calls == immediate_adder.calls[: len(deferred_adder.calls)]
        assert len(deferred.actor._pending) >= 1
    assert deferred_adder.num_items < immediate_adder.num_items
    deferred.flush()
    assert deferred_adder.calls == immediate_adder.calls
    assert deferred_adder.num_items == immediate_adder.num_items
    # Same schedule and key: the next actions agree.
    assert deferred.actor.step_count == immediate.actor.step_count == 60
    observation = np.array([[1.0, 2.0], [0.0, 1.0], [2.0, 0.0]], np.float32)
    np.testing.assert_array_equal(immediate.actor.select_action(observation), deferred.actor.select_action(observation))


def test_loop_budgets_and_evaluation_points_leave_nothing_queued():
    immediate, immediate_adder = make_loop(defer=False)
    deferred, deferred_adder = make_loop(defer=True)
    immediate.run_steps(31)  # Ten steps of three copies and one of one copy.
    deferred.run_steps(31)
    assert not deferred.actor._pending
    assert deferred_adder.calls == immediate_adder.calls
    deferred.step()
    immediate.step()
    deferred.count_partial_episode()
    assert deferred_adder.calls == immediate_adder.calls
    immediate.run_steps(9)
    deferred.run_steps(9)
    assert deferred_adder.calls == immediate_adder.calls


def test_reading_the_adder_flushes_and_a_new_adder_drops_the_queue():
    loop, adder = make_loop(defer=True)
    for _ in range(5):
        loop.step()
    calls, queued = len(adder.calls), len(loop.actor._pending)
    assert queued >= 1
    assert loop.actor.adder is adder
    assert len(adder.calls) == calls + queued and not loop.actor._pending
    loop.step()
    calls = len(adder.calls)
    assert loop.actor._pending
    replacement = Recorder()
    loop.actor.adder = replacement  # The queued step belonged to the old connection.
    assert not loop.actor._pending and len(adder.calls) == calls
    loop.drop_episodes()
    loop.step()
    loop.flush()
    assert [call[0] for call in replacement.calls] == ["add_first", "add"]
    assert len(adder.calls) == calls


def test_an_adder_error_surfaces_from_the_next_step_and_drops_the_queue():
    class Failing(Recorder):
        def add(self, actions, next_timestep, env_ids=None):
            raise TimeoutError("replay gone")

    loop, _ = make_loop(defer=True)
    loop.actor.adder = Failing()
    loop.drop_episodes()
    loop.step()  # add_first (queued) and add (queued).
    try:
        loop.step()
    except TimeoutError:
        pass
    else:  # pragma: no cover - the assertion below says what went wrong.
        raise AssertionError("the queued add should have raised in the next step")
    assert not loop.actor._pending


def test_an_evaluation_round_is_timed_from_when_it_took_its_parameters():
    """time_to_threshold_s reads `round_started_at`: the moment the evaluated parameters
    were fetched, before any of the round's episodes ran (not when the round ended)."""
    loop, _ = make_loop(defer=False)
    episodes_began = []
    run_episodes = loop.run_episodes

    def timed_run_episodes(num_episodes):
        episodes_began.append(time.time())
        time.sleep(0.05)  # The round's episodes take time; its start must not move with them.
        return run_episodes(num_episodes)

    loop.run_episodes = timed_run_episodes
    before = time.time()
    loop.run_evaluation(2)
    assert before <= loop.round_started_at <= episodes_began[0]
