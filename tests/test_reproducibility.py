"""What the same command and seed reproduce (docs/reproducibility.md).

With `launcher.deterministic=true` two runs of the same command are identical: every log
row except the wall-clock fields, the summary except its times, and the learner state
of every checkpoint. Without it (the default), the environment seeds, network
initialisation and every policy and evaluation key still derive from `seed`, so two runs
act and evaluate identically until the learner's first update, after which reverb's
unseeded samplers and thread timing make them differ.
"""

from __future__ import annotations

import csv
import os
import signal

import pytest

import golden_runs

from rl import checkpointing
from conftest import read_summary, run_train, start_train

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

COMMAND = [
    "max_actor_steps=1500",
    "eval_every=500",
    "eval_episodes=2",
    "agent.min_replay_size=600",
    "network.hidden_sizes=[32,32]",
    "progress=false",
    "checkpoint.every_seconds=0.5",  # Checkpoints at moments that depend on timing: they must not matter.
    "checkpoint.keep=100",
    "seed=11",
]
EPISODE_KEYS = ("actor_steps", "episode_return", "episode_length")


def _rows(run_dir: str, label: str) -> list[dict[str, str]]:
    with open(os.path.join(run_dir, "logs", f"{label}.csv"), newline="") as file:
        return list(csv.DictReader(file))


def _runs(base, *overrides):
    runs = []
    for name in ("first", "second"):
        run_dir = str(base / name)
        result = run_train([*COMMAND, *overrides, f"hydra.run.dir={run_dir}"], timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(run_dir)
    return runs


@pytest.fixture(scope="module")
def deterministic_runs(tmp_path_factory):
    return _runs(tmp_path_factory.mktemp("deterministic"), "launcher.deterministic=true")


def test_two_deterministic_runs_are_identical(deterministic_runs):
    first, second = (golden_runs.record(run_dir) for run_dir in deterministic_runs)
    assert set(first["logs"]) == {"logs/actor.csv", "logs/learner.csv", "logs/evaluator.csv"}
    assert len(first["logs"]["logs/learner.csv"]) >= 5  # The learner learned, and logged.
    assert first == second
    assert read_summary(deterministic_runs[0])["learner_steps"] > 0


def test_checkpoints_of_two_deterministic_runs_at_the_same_step_hold_the_same_learner(deterministic_runs):
    """Checkpoints come every half second, so the two runs saved at different steps; the
    final one (at the budget) they share, and with it the learner state."""
    digests = []
    for run_dir in deterministic_runs:
        states = {
            checkpointing.step_of(path): checkpointing.read_state(path)["learner"]["digest"]
            for path in checkpointing.list_checkpoints(run_dir)
        }
        assert 1500 in states
        digests.append(states)
    assert digests[0][1500] == digests[1][1500]


def test_a_deterministic_run_stopped_and_resumed_equals_the_uninterrupted_one(deterministic_runs, tmp_path):
    """SIGTERM once learning is under way (a checkpoint of the whole in-process state),
    then the same command: every record, the summary and the final learner state equal
    the uninterrupted run's."""
    from test_resume import _acted_past, _wait_throttled, _wait_until

    run_dir = str(tmp_path / "stopped")
    command = [*COMMAND, "launcher.deterministic=true", f"hydra.run.dir={run_dir}"]
    process = start_train(command)
    _wait_until(lambda: _acted_past(run_dir, 0), process)  # Start-up at full speed, ...
    _wait_throttled(lambda: _acted_past(run_dir, 900), process)  # ... then slowed to catch step 900.
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGCONT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr[-3000:]
    stopped_at = read_summary(run_dir)["actor_steps"]
    assert 900 < stopped_at < 1500, stopped_at
    result = run_train(command, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed, uninterrupted = golden_runs.record(run_dir), golden_runs.record(deterministic_runs[0])
    assert resumed == uninterrupted


@pytest.mark.slow
def test_the_default_mode_acts_identically_until_the_first_update(tmp_path):
    runs = _runs(tmp_path, "checkpoint.enabled=false")
    before = []
    for run_dir in runs:
        rows = _rows(run_dir, "actor")
        # Episodes that ended before the first update could happen (600 items in replay).
        early = [row for row in rows if int(row["actor_steps"]) <= 600]
        assert len(early) >= 5 and all(int(row.get("learner_steps") or 0) == 0 for row in early)
        evaluations = [row for row in _rows(run_dir, "evaluator") if int(row.get("learner_steps") or 0) == 0]
        assert [row["actor_steps"] for row in evaluations] == ["500"]  # The first update comes at 600.
        before.append(
            (
                [tuple(row[key] for key in EPISODE_KEYS) for row in early],
                [{k: v for k, v in row.items() if not golden_runs.is_wall_clock(k)} for row in evaluations],
            )
        )
    assert before[0] == before[1]
    assert all(read_summary(run_dir)["actor_steps"] == 1500 for run_dir in runs)
