"""What the same command and seed reproduce (README, "Reproducibility").

Environment seeds, network initialisation and every policy and evaluation key derive from
`seed`, so two runs act and evaluate identically until the learner's first update. After
it, what the learner samples comes from reverb's samplers, which take no seed: runs differ
from there on, whatever the launcher.
"""

from __future__ import annotations

import csv
import os

import pytest

from conftest import read_summary, run_train

COMMAND = [
    "max_actor_steps=1500",
    "eval_every=500",
    "eval_episodes=2",
    "agent.min_replay_size=600",
    "network.hidden_sizes=[32,32]",
    "progress=false",
    "checkpoint.enabled=false",
    "seed=11",
]
EPISODE_KEYS = ("actor_steps", "episode_return", "episode_length")


def _rows(run_dir: str, label: str) -> list[dict[str, str]]:
    with open(os.path.join(run_dir, "logs", f"{label}.csv"), newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("reproducibility")
    runs = []
    for name in ("first", "second"):
        run_dir = str(base / name)
        result = run_train([*COMMAND, f"hydra.run.dir={run_dir}"], timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(run_dir)
    return runs


def test_two_runs_act_identically_until_the_first_update(two_runs):
    before = []
    for run_dir in two_runs:
        rows = _rows(run_dir, "actor")
        # Episodes that ended before the first update could happen (600 items in replay).
        early = [row for row in rows if int(row["actor_steps"]) <= 600]
        assert len(early) >= 5 and all(int(row.get("learner_steps") or 0) == 0 for row in early)
        before.append([tuple(row[key] for key in EPISODE_KEYS) for row in early])
    assert before[0] == before[1]


def test_evaluations_before_the_first_update_are_identical(two_runs):
    before = []
    for run_dir in two_runs:
        rows = [row for row in _rows(run_dir, "evaluator") if int(row.get("learner_steps") or 0) == 0]
        assert [row["actor_steps"] for row in rows] == ["500"]  # The first update comes at 600.
        before.append([{key: value for key, value in row.items() if key != "wall_time_s"} for row in rows])
    assert before[0] == before[1]
    assert all(read_summary(run_dir)["actor_steps"] == 1500 for run_dir in two_runs)
