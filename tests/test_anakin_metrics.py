"""launcher=anakin's learner records average only the updates that took SGD steps: an
off-policy update before the buffer holds `min_replay_size` transitions trains nothing,
and its zeros are no loss."""

from __future__ import annotations

import csv
import os

import jax
import numpy as np
import pytest

from conftest import short_compiled_run
from test_anakin import compose_experiment
from rl.anakin.build import make_system
from rl.systems.base import make_chunk


# 4 copies, one SGD step of 16 transitions per update once 64 transitions are stored
# (update 16 on), chunks of 32 updates: 17 of the first chunk's updates train.
TINY_DQN = [
    "experiment=dqn_gymnax_cartpole",
    "environment.num_envs=4",
    "agent.batch_size=16",
    "agent.samples_per_insert=4",
    "agent.min_replay_size=64",
    "network.hidden_sizes=[16]",
    *short_compiled_run(256, 128),
]


def test_a_chunk_averages_the_learner_metrics_over_the_updates_that_trained(tmp_path):
    experiment, _ = compose_experiment(TINY_DQN, str(tmp_path))
    system = make_system(experiment)
    state = jax.jit(system.init)(jax.random.PRNGKey(3))

    def one(state, _):
        state, metrics, _ = system.update(state)
        return state, (metrics, state.actor_steps)

    _, (per_update, actor_steps) = jax.jit(lambda s: jax.lax.scan(one, s, None, length=32))(state)
    _, chunk = jax.jit(make_chunk(system, 32))(state)

    trained = np.asarray(actor_steps) >= 64
    assert trained.sum() == 17  # Updates 16..32 of the chunk.
    assert np.all(np.asarray(per_update["td_error"])[trained] > 0)
    for name in ("td_error", "q_mean", "gradient_norm"):
        values = np.asarray(per_update[name])
        assert np.all(values[~trained] == 0)  # No SGD step: the zeros of a placeholder.
        assert float(chunk[name]) == pytest.approx(float(values[trained].mean()), rel=1e-5)
    assert int(chunk["trained_updates"]) == 17


def test_a_learner_record_without_sgd_steps_has_no_learner_metrics(tmp_path):
    """min_replay_size=160: the first chunk (updates 1..32, up to 128 transitions) trains
    nothing, so its record has no td_error (an empty cell, not 0); the second trains
    from update 40 on."""
    experiment, launcher = compose_experiment([*TINY_DQN, "agent.min_replay_size=160"], str(tmp_path))
    summary = launcher(experiment)
    assert summary.learner_steps == 25 and summary.status == "finished"
    with open(os.path.join(tmp_path, "logs", "learner.csv")) as file:
        rows = list(csv.DictReader(file))
    assert [int(row["learner_steps"]) for row in rows] == [0, 25]
    assert rows[0]["td_error"] == rows[0]["gradient_norm"] == rows[0]["q_mean"] == ""
    assert float(rows[1]["td_error"]) > 0 and "trained_updates" not in rows[1]
