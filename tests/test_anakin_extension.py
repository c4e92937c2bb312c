"""Extending a finished `launcher=anakin` run through the real entry point: the mechanism is the local launcher's
(rl/experiments/extension.py), and the compiled off-policy system's replay buffer, part of the learner state and
sized min(agent.max_replay_size, max_actor_steps), keeps the size it was saved with."""

from __future__ import annotations

import csv
import os

import pytest

import conftest
from conftest import read_summary, run_train

# The compiled path is the same on both stacks: run once (pytest.ini).
pytestmark = pytest.mark.current

# PQN (on-policy, no buffer): 4 copies x 16 steps an update, 2 replicas.
SMALL_PQN = [
    "launcher=anakin",
    *conftest.SMALL_PQN,
    "logger=csv",
    "progress=false",
    "launcher.num_seeds=2",
    "seed=3",
]
# DQN (its buffer in the learner state): one SGD step of 16 transitions per update once 64 are stored.
SMALL_DQN = [
    "launcher=anakin",
    "experiment=dqn_gymnax_cartpole",
    "environment.num_envs=4",
    "agent.batch_size=16",
    "agent.samples_per_insert=4",
    "agent.min_replay_size=64",
    "network.hidden_sizes=[32]",
    "eval_every=128",
    "eval_episodes=2",
    "logger=csv",
    "progress=false",
]


def _evaluated_steps(run_dir: str) -> list[int]:
    """The evaluation rounds in the (first replica's) evaluator log: a run of several seeds has one per seed."""
    replica = os.path.join(run_dir, "seed_0")
    logs = os.path.join(replica if os.path.isdir(replica) else run_dir, "logs")
    with open(os.path.join(logs, "evaluator.csv"), newline="") as file:
        return [int(row["actor_steps"]) for row in csv.DictReader(file)]


def _finish_then_extend(tmp_path, command: list[str], budget: int, choice: str) -> tuple[str, str]:
    run_dir = str(tmp_path / "run")
    first = run_train([*command, f"max_actor_steps={budget}", f"hydra.run.dir={run_dir}"], timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    curve = read_summary(run_dir)["eval_returns"]
    extended = run_train([f"resume={run_dir}", f"max_actor_steps={2 * budget}", f"extend={choice}"], timeout=600)
    assert extended.returncode == 0, extended.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["actor_steps"] == 2 * budget and summary["status"] == "finished"
    assert summary["eval_returns"][: len(curve)] == curve
    assert _evaluated_steps(run_dir) == list(range(0, 2 * budget + 1, 128))  # At 0 once: the first run's.
    return run_dir, extended.stdout


def test_an_anakin_pqn_run_is_extended_with_its_schedules_stretched(tmp_path):
    run_dir, stdout = _finish_then_extend(tmp_path, SMALL_PQN, 512, "stretch")
    assert (
        f"Extending the run in {run_dir} from 512 to 1024 actor steps; its schedules stretch "
        "(policy.run_steps 512 -> 1024, agent.decay_actor_steps 512 -> 1024; extend=keep keeps them)"
    ) in stdout


def test_an_anakin_dqn_run_is_extended_with_its_replay_buffer_at_its_saved_size(tmp_path):
    run_dir, stdout = _finish_then_extend(tmp_path, SMALL_DQN, 256, "keep")
    assert (
        f"Extending the run in {run_dir} from 256 to 512 actor steps; its schedules keep their horizon "
        "(policy.run_steps=256, agent.learning_rate_decay_actor_steps=256; extend=stretch stretches them); "
        "its replay buffer keeps its size (agent.max_replay_size=256)"
    ) in stdout
