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
# A small PPO on gymnax CartPole, 128 actor steps a chunk, and no periodic checkpoint within a test.
SMALL_PPO = [
    "experiment=ppo_gymnax_cartpole",
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


def _kill_once_written(process: subprocess.Popen, pattern: str, rows: int, timeout: float = 300) -> None:
    """SIGKILL to `process` once a CSV log matching the glob `pattern` holds `rows` rows; the process is held
    still (SIGSTOP) while the logs are read, so the kill lands mid-run."""
    deadline = time.monotonic() + timeout
    while True:
        process.send_signal(signal.SIGSTOP)
        if any(len(_rows(path)) >= rows for path in glob.glob(pattern)):
            break
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run wrote no log rows in time"
        process.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)


def _steps_once_each(path: str) -> list[str]:
    steps = [row["actor_steps"] for row in _rows(path)]
    assert len(steps) == len(set(steps)), f"{path} repeats actor_steps"
    return steps


def _dead_rows(pattern: str) -> dict[str, list[str]]:
    """The `actor_steps` of each log matching `pattern` that holds rows, by path."""
    found = {path: [row["actor_steps"] for row in _rows(path)] for path in glob.glob(pattern)}
    return {path: steps for path, steps in found.items() if steps}


def _set_aside(dead: dict[str, list[str]], session: int) -> None:
    """Each of the `dead` logs' rows is in its logs/superseded/<label>.session<session>.csv."""
    for path, steps in dead.items():
        label = os.path.splitext(os.path.basename(path))[0]
        aside = os.path.join(os.path.dirname(path), "superseded", f"{label}.session{session}.csv")
        assert [row["actor_steps"] for row in _rows(aside)] == steps


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
    arguments = [*SMALL_PPO, f"launcher.num_seeds={SEEDS}", f"hydra.run.dir={tmp_path}"]
    process = start_train(arguments)
    _kill_once_written(process, str(tmp_path / f"seed_{SEEDS - 1}" / "logs" / "learner.csv"), rows=2)
    assert not glob.glob(str(tmp_path / "checkpoints" / "step_*"))  # Killed before its first checkpoint.
    dead = _dead_rows(str(tmp_path / "seed_*" / "logs" / "*.csv"))
    assert {os.path.join(str(tmp_path), f"seed_{i}", "logs", "learner.csv") for i in range(SEEDS)} <= set(dead)

    again = run_train(arguments, timeout=600)

    assert again.returncode == 0, again.stderr[-3000:]
    assert "earlier log rows move to logs/superseded/" in again.stderr
    assert read_summary(str(tmp_path))["actor_steps"] == 4096
    for index in range(SEEDS):
        logs = tmp_path / f"seed_{index}" / "logs"
        for label in ("actor", "evaluator"):
            _steps_once_each(str(logs / f"{label}.csv"))
        assert _steps_once_each(str(logs / "learner.csv")) == [str(steps) for steps in range(128, 4097, 128)]
    _set_aside(dead, session=1)


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_grid_killed_mid_run_starts_over_with_its_groups_and_jobs_rows_aside(tmp_path):
    """hydra/launcher=anakin_grid, 2 jobs in one group, killed (SIGKILL) after evaluation rounds, before any job
    kept a checkpoint: the same command starts the jobs over (each then keeps its final state), and neither a
    job's logs nor the group's own records (the jobs' mean, in .grid/<group>/logs/) repeat an `actor_steps`; the
    dead run's rows are in their logs/superseded/."""
    arguments = ["-m", "hydra/launcher=anakin_grid", "seed=0,1", *SMALL_PPO, f"hydra.sweep.dir={tmp_path}"]
    group_records = str(tmp_path / ".grid" / "*" / "logs" / "evaluator.csv")
    process = start_train(arguments)
    _kill_once_written(process, group_records, rows=2)
    dead = _dead_rows(group_records) | _dead_rows(str(tmp_path / "[01]" / "logs" / "*.csv"))
    assert len(dead) >= 3  # The group's records and the jobs' logs.
    checkpoints = str(tmp_path / "[01]" / "checkpoints" / "step_*")
    assert not glob.glob(checkpoints)  # A grid job keeps its checkpoint once it finishes, none before.

    again = run_train(arguments, timeout=600)

    assert again.returncode == 0, again.stderr[-3000:]
    for path in glob.glob(group_records) + glob.glob(str(tmp_path / "[01]" / "logs" / "*.csv")):
        _steps_once_each(path)
    assert len(_rows(glob.glob(group_records)[0])) == 4096 // 512 + 1  # With the untrained policy's round at 0.
    assert sorted(glob.glob(checkpoints)) == [str(tmp_path / job / "checkpoints" / "step_4096") for job in "01"]
    _set_aside(dead, session=1)
