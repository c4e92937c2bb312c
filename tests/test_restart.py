"""A run started again in its directory with no checkpoint to resume from starts over, and the dead run's log rows
move aside, in the run's own logs and in every replica's (`seed_<i>/logs/`), whatever the launcher."""

from __future__ import annotations

import csv
import glob
import os
import signal
import subprocess
import time

import pytest

from conftest import read_summary, run_train, start_train
from rl.experiments.resume import trim_logs

SEEDS = 3
# A small PPO on gymnax CartPole in 3 seeds, 128 actor steps a chunk, and no periodic checkpoint within the test.
THREE_SEEDS = [
    "experiment=ppo_gymnax_cartpole",
    f"launcher.num_seeds={SEEDS}",
    "launcher.steps_per_chunk=2",
    "agent.unroll_length=16",
    "agent.num_epochs=2",
    "agent.num_minibatches=2",
    "max_actor_steps=4096",
    "eval_every=512",
    "eval_episodes=3",
    "logger=csv",
    "progress=false",
    "checkpoint.every_seconds=3600",
]


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def _write_rows(path: str, rows: list[dict[str, int]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _kill_once_written(process: subprocess.Popen, log: str, rows: int, timeout: float = 300) -> None:
    """SIGKILL to `process` once its CSV `log` holds `rows` rows; the process is held still (SIGSTOP) while the
    log is read, so the kill lands mid-run."""
    deadline = time.monotonic() + timeout
    while True:
        process.send_signal(signal.SIGSTOP)
        if os.path.exists(log) and len(_rows(log)) >= rows:
            break
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run wrote no log rows in time"
        process.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)


def test_a_restart_from_scratch_moves_every_replicas_rows_aside(tmp_path):
    """No restore point: every row of the run's logs and of each replica's moves to its logs/superseded/, the
    rows at actor step 0 too (the new run writes them again)."""
    for directory in (tmp_path, tmp_path / "seed_0", tmp_path / "seed_1"):
        _write_rows(str(directory / "logs" / "evaluator.csv"), [{"actor_steps": 0}, {"actor_steps": 128}])

    trim_logs(str(tmp_path), 1)

    for directory in (tmp_path, tmp_path / "seed_0", tmp_path / "seed_1"):
        assert _rows(str(directory / "logs" / "evaluator.csv")) == []
        aside = _rows(str(directory / "logs" / "superseded" / "evaluator.session1.csv"))
        assert [row["actor_steps"] for row in aside] == ["0", "128"]


def test_a_resume_moves_each_replicas_rows_past_the_restore_point_aside(tmp_path):
    """A restore point at 128 actor steps: rows after it move aside, in the run's logs and each replica's."""
    for directory in (tmp_path, tmp_path / "seed_0", tmp_path / "seed_1"):
        _write_rows(str(directory / "logs" / "learner.csv"), [{"actor_steps": 128}, {"actor_steps": 256}])

    trim_logs(str(tmp_path), 2, {"actor_steps": 128, "learner_steps": 2})

    for directory in (tmp_path, tmp_path / "seed_0", tmp_path / "seed_1"):
        assert [row["actor_steps"] for row in _rows(str(directory / "logs" / "learner.csv"))] == ["128"]
        aside = _rows(str(directory / "logs" / "superseded" / "learner.session2.csv"))
        assert [row["actor_steps"] for row in aside] == ["256"]


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_seeds_killed_before_their_first_checkpoint_start_over_with_the_dead_runs_rows_aside(tmp_path):
    """launcher=anakin with 3 seeds, killed (SIGKILL) before its first checkpoint: the same command starts the
    run over, says the earlier rows move to logs/superseded/, and they do, in every seed's logs; no seed's CSV
    repeats an `actor_steps`."""
    arguments = [*THREE_SEEDS, f"hydra.run.dir={tmp_path}"]
    process = start_train(arguments)
    _kill_once_written(process, str(tmp_path / f"seed_{SEEDS - 1}" / "logs" / "learner.csv"), rows=2)
    assert not glob.glob(str(tmp_path / "checkpoints" / "step_*"))  # Killed before its first checkpoint.
    dead = {}
    for path in glob.glob(str(tmp_path / "seed_*" / "logs" / "*.csv")):
        dead[path] = [row["actor_steps"] for row in _rows(path)]
    assert all(dead[str(tmp_path / f"seed_{i}" / "logs" / "learner.csv")] for i in range(SEEDS))

    again = run_train(arguments, timeout=600)

    assert again.returncode == 0, again.stderr[-3000:]
    assert "earlier log rows move to logs/superseded/" in again.stderr
    assert read_summary(str(tmp_path))["actor_steps"] == 4096
    for index in range(SEEDS):
        logs = tmp_path / f"seed_{index}" / "logs"
        for label in ("actor", "learner", "evaluator"):
            steps = [row["actor_steps"] for row in _rows(str(logs / f"{label}.csv"))]
            assert len(steps) == len(set(steps)), f"seed_{index}/logs/{label}.csv repeats actor_steps"
        learner = [int(row["actor_steps"]) for row in _rows(str(logs / "learner.csv"))]
        assert learner == list(range(128, 4097, 128))
    for path, steps in ((path, steps) for path, steps in dead.items() if steps):
        label = os.path.splitext(os.path.basename(path))[0]
        aside = os.path.join(os.path.dirname(path), "superseded", f"{label}.session1.csv")
        assert [row["actor_steps"] for row in _rows(aside)] == steps
