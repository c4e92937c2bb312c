"""Adding an agent edits no existing file: QR-DQN (tests/agents/qrdqn.py, with its
tests/agents/conf/agent/qrdqn.yaml) runs under launcher=local, ray and anakin, found
through Hydra's search path and PYTHONPATH as a user's own package would be."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTS = os.path.join(ROOT, "tests", "agents")
COMMON = [
    "agent=qrdqn",
    f"hydra.searchpath=[file://{AGENTS}/conf]",
    "agent.num_quantiles=8",
    "agent.min_replay_size=200",
    "network.hidden_sizes=[32,32]",
    "max_actor_steps=2000",
    "eval_every=1000",
    "eval_episodes=2",
    "logger=csv",
    "progress=false",
]
LAUNCHERS = {
    "local": [],
    "ray": ["launcher=ray", "launcher.num_actors=1"],
    "anakin": ["launcher=anakin", "environment=gymnax", "environment.name=CartPole-v1"],  # One copy: its own defaults.
}


def _train(launcher: str, run_dir: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (AGENTS, os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), *COMMON, *LAUNCHERS[launcher]]
    process = subprocess.run(
        [*command, f"hydra.run.dir={run_dir}"], env=env, capture_output=True, text=True, timeout=900
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as file:
        return json.load(file)


def _check(summary: dict, run_dir: str) -> None:
    assert summary["status"] == "finished" and summary["agent"] == "qrdqn" and summary["actor_steps"] == 2000
    with open(os.path.join(run_dir, "logs", "learner.csv"), newline="") as file:
        losses = [float(row["quantile_loss"]) for row in csv.DictReader(file) if row.get("quantile_loss")]
    assert losses and all(math.isfinite(loss) for loss in losses)  # The agent's own loss trained.


@pytest.mark.parametrize("launcher", [pytest.param("local", marks=pytest.mark.reverb), "anakin"])
def test_a_user_agent_runs_under_local_and_anakin(tmp_path, launcher):
    _check(_train(launcher, str(tmp_path)), str(tmp_path))


@pytest.mark.reverb
@pytest.mark.ray
def test_a_user_agent_runs_under_ray(tmp_path):
    _check(_train("ray", str(tmp_path)), str(tmp_path))
