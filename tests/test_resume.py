"""Stops and resumes through the real entry point (scripts/train.py in a subprocess).

One run goes through every kind of stop: SIGTERM at a quarter of its budget (a clean
stop: checkpoint, "interrupted" summary, exit 143), the same command resumes it, SIGKILL
at half the budget, its newest checkpoint is then damaged, and the same command resumes
it again from the previous one and finishes exactly at its budget with one continuous
curve. Bad inputs are one-line errors that change nothing.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import jax
import pytest
import yaml

from conftest import ROOT, read_summary, run_train, start_train, wandb_records
from test_checkpoints import _bitwise_equal, _corrupt, _leaves
from rl import checkpointing

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

BUDGET = 800
COMMAND = [
    "logger=wandb",
    f"max_actor_steps={BUDGET}",
    f"eval_every={BUDGET // 4}",
    "eval_episodes=1",
    "agent.min_replay_size=100",
    "network.hidden_sizes=[64,64]",
    "progress=false",
    "checkpoint.every_seconds=0.5",
]


def _wait_until(condition, process: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.1)


def _wait_throttled(condition, process: subprocess.Popen, timeout: float = 600) -> None:
    """Waits for `condition` while letting the process run only 20 ms in every 100 ms.

    The run is stopped (SIGSTOP) whenever the condition is checked and is left stopped
    once it holds, so a fast run cannot slip past the state the test wants to catch (it
    once finished its whole budget between two polls). Its wall-clock checkpoint period
    passes five times faster than its own work, so checkpoints come at short intervals.
    """
    deadline = time.monotonic() + timeout
    while True:
        process.send_signal(signal.SIGSTOP)
        if condition():
            return
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.08)
        process.send_signal(signal.SIGCONT)
        time.sleep(0.02)


def _acted_past(run_dir: str, actor_steps: int) -> bool:
    """Whether the actor has logged an episode that ended after `actor_steps`."""
    path = os.path.join(run_dir, "logs", "actor.csv")
    return os.path.exists(path) and any(int(row["actor_steps"]) > actor_steps for row in _rows(path))


def _evaluated(run_dir: str, actor_steps: int) -> bool:
    path = os.path.join(run_dir, "logs", "evaluator.csv")
    return os.path.exists(path) and any(int(row["actor_steps"]) >= actor_steps for row in _rows(path))


def _our_lines(stderr: str) -> list[str]:
    """stderr without reverb's own C++ log lines."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("[reverb/")]


def _rows(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def _fingerprint(directory: str) -> dict[str, str]:
    prints = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                prints[os.path.relpath(path, directory)] = hashlib.sha256(file.read()).hexdigest()
    return prints


def _wandb_runs(run_dir: str) -> list[tuple[str, int | None]]:
    """(run id, exit code or None) of every offline W&B run in the run directory, oldest first."""
    runs = []
    for directory in sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*"))):
        (path,) = glob.glob(os.path.join(directory, "run-*.wandb"))
        exit_code = None
        for record in wandb_records(path):
            if record.WhichOneof("record_type") == "exit":
                exit_code = record.exit.exit_code
        runs.append((directory.rsplit("-", 1)[1], exit_code))
    return runs


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """The run of the module docstring; what each stop left behind is kept for the tests."""
    base = tmp_path_factory.mktemp("resume")
    run_dir = str(base / "run")
    command = [*COMMAND, f"hydra.run.dir={run_dir}"]
    seen: dict = {"run_dir": run_dir, "command": command}

    process = start_train(command)  # Stopped by SIGTERM at a quarter of the budget.
    _wait_until(lambda: _acted_past(run_dir, 0), process)
    _wait_throttled(lambda: _evaluated(run_dir, BUDGET // 4), process)
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGCONT)
    _, stderr = process.communicate(timeout=300)
    newest = checkpointing.list_checkpoints(run_dir)[0]
    seen["sigterm"] = {
        "returncode": process.returncode,
        "stderr": stderr,
        "summary": read_summary(run_dir),
        "checkpoint": shutil.copytree(newest, str(base / "sigterm" / os.path.basename(newest))),
    }

    process = start_train(command)  # Resumed, then killed with SIGKILL at half the budget.
    stop_step = seen["sigterm"]["summary"]["actor_steps"]

    def two_checkpoints_of_this_session() -> bool:
        # Both kept checkpoints are this session's, so the one restored after the
        # newest is damaged is this session's too (session 1; the next one is 2).
        kept = checkpointing.list_checkpoints(run_dir)
        return len(kept) == 2 and min(checkpointing.step_of(path) for path in kept) > stop_step

    _wait_until(lambda: _acted_past(run_dir, stop_step), process)
    _wait_throttled(lambda: _evaluated(run_dir, BUDGET // 2) and two_checkpoints_of_this_session(), process)
    assert not os.path.exists(os.path.join(run_dir, "summary.json")) or read_summary(run_dir)["status"] != "finished"
    process.send_signal(signal.SIGKILL)
    stdout, _ = process.communicate(timeout=60)
    seen["killed"] = {
        "stdout": stdout,
        "states": [checkpointing.read_state(path) for path in checkpointing.list_checkpoints(run_dir)],
        "damaged": checkpointing.list_checkpoints(run_dir)[0],
    }
    _corrupt(seen["killed"]["damaged"])

    seen["resumed"] = run_train(command, timeout=900)  # The same command again.
    return seen


def test_sigterm_stops_cleanly_with_a_checkpoint_that_restores_bitwise(stopped_run):
    from omegaconf import OmegaConf

    from rl.counting import Counter
    from rl.experiments.make_experiment import make_experiment
    from rl.loggers.base import NoOpLogger
    from rl.systems.learning import SGDLearner

    stop, run_dir = stopped_run["sigterm"], stopped_run["run_dir"]
    assert stop["returncode"] == 143, stop["stderr"][-3000:]
    lines = _our_lines(stop["stderr"])
    assert len(lines) == 2 and "Interrupted: stopped by SIGTERM at" in lines[1], stop["stderr"][-3000:]
    assert lines[0].startswith("stopping on SIGTERM: "), lines  # Said at once: what the run finishes first.
    assert "Traceback" not in stop["stderr"]
    summary, path = stop["summary"], stop["checkpoint"]
    state = checkpointing.read_state(path)
    assert summary["status"] == "interrupted"
    assert BUDGET // 4 <= summary["actor_steps"] == state["actor_steps"] == state["counts"]["actor_steps"] < BUDGET
    assert os.path.basename(path) == f"step_{summary['actor_steps']}"
    assert summary["learner_steps"] == state["counts"]["learner_steps"] > 0
    assert [s for s, _ in summary["eval_returns"]] == [s for s, _ in state["eval_returns"]] == [0, BUDGET // 4]
    assert _wandb_runs(run_dir)[0][1] == 143

    # The learner state, rebuilt from the run's config, is the one the process held when it
    # stopped, bit for bit: state.json's digest was taken from its memory at the stop.
    config = OmegaConf.load(os.path.join(run_dir, ".hydra", "config.yaml"))
    config.logger = {"_target_": "rl.loggers.DefaultLoggerFactory", "terminal": False, "csv": False, "wandb": None}
    experiment, _ = make_experiment(config, run_dir)
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    learning = experiment.builder.make_learning(networks)
    learner = SGDLearner(learning, jax.random.PRNGKey(9), iter(()), None, Counter(), NoOpLogger())
    restored = checkpointing.restore_learner_state(path, learner.save())
    assert checkpointing.state_digest(_leaves(restored)) == state["learner"]["digest"]
    learner.restore(restored)
    assert _bitwise_equal(learner.save(), restored)  # Parameters, targets and optimiser state.
    assert int(restored.steps) == summary["learner_steps"]  # One SGD step per learner step here.


def test_a_killed_run_resumes_to_exactly_its_budget_with_one_curve(stopped_run):
    run_dir, result, killed = stopped_run["run_dir"], stopped_run["resumed"], stopped_run["killed"]
    stop_step = stopped_run["sigterm"]["summary"]["actor_steps"]
    assert f"Resuming {run_dir} from step_{stop_step} " in killed["stdout"]
    assert result.returncode == 0, result.stderr[-3000:]
    newest, previous = killed["states"]
    assert f"Warning: checkpoint {killed['damaged']} is damaged" in result.stderr
    assert f"Resuming {run_dir} from step_{previous['actor_steps']} " in result.stdout
    damaged = os.path.join(run_dir, "checkpoints", f"damaged_{os.path.basename(killed['damaged'])}")
    assert os.path.isdir(damaged)  # Kept, set aside.

    summary = read_summary(run_dir)
    assert summary["status"] == "finished"
    assert summary["actor_steps"] == BUDGET
    evaluation_steps = list(range(0, BUDGET + 1, BUDGET // 4))  # The untrained policy's round once, at 0.
    assert [steps for steps, _ in summary["eval_returns"]] == evaluation_steps
    # The curve up to the restore point is the earlier sessions', unchanged.
    assert summary["eval_returns"][: len(previous["eval_returns"])] == previous["eval_returns"]
    assert summary["eval_returns"][0] == stopped_run["sigterm"]["summary"]["eval_returns"][0]
    assert summary["final_eval_return"] == summary["eval_returns"][-1][1]

    logs = os.path.join(run_dir, "logs")
    evaluations = _rows(os.path.join(logs, "evaluator.csv"))
    assert [int(row["actor_steps"]) for row in evaluations] == evaluation_steps
    assert [float(row["episode_return"]) for row in evaluations] == [value for _, value in summary["eval_returns"]]
    for label, key in (("actor", "actor_steps"), ("learner", "learner_steps"), ("learner", "actor_steps")):
        values = [int(row[key]) for row in _rows(os.path.join(logs, f"{label}.csv"))]
        assert values == sorted(values), (label, key)
    learner_steps = [int(row["learner_steps"]) for row in _rows(os.path.join(logs, "learner.csv"))]
    assert len(set(learner_steps)) == len(learner_steps) and learner_steps[-1] <= summary["learner_steps"]
    assert glob.glob(os.path.join(logs, "superseded", "*.csv"))  # Rows past the restore point, set aside.
    final = checkpointing.read_state(checkpointing.list_checkpoints(run_dir)[0])
    assert previous["session"] == 1
    assert final["actor_steps"] == BUDGET and final["session"] == 2
    assert final["actor_schedule_step"] == BUDGET  # Exploration carried on from each restore point.

    with open(os.path.join(run_dir, "run.json")) as file:
        run_id = json.load(file)["wandb_run_id"]
    runs = _wandb_runs(run_dir)
    assert [identifier for identifier, _ in runs] == [run_id] * 3  # One W&B run, resumed twice.
    assert [code for _, code in runs] == [143, None, 0]  # Stopped, killed (no exit record), finished.


def test_resuming_a_finished_run_exits_0_and_changes_nothing(stopped_run):
    run_dir = stopped_run["run_dir"]
    before = _fingerprint(run_dir)
    result = run_train(stopped_run["command"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"The run in {run_dir} has already finished ({BUDGET} actor steps" in result.stdout
    assert _fingerprint(run_dir) == before


def _unfinished_copy(stopped_run, tmp_path) -> str:
    copy = str(tmp_path / "copy")
    shutil.copytree(stopped_run["run_dir"], copy)
    os.remove(os.path.join(copy, "summary.json"))
    return copy


def test_a_run_whose_saved_config_names_the_launcher_s_old_module_resumes(stopped_run, tmp_path):
    """Runs written before the launchers moved to rl/local/ and rl/ray/ name the old class in `.hydra/config.yaml`:
    `resume=DIR` reads it under its new name (rl/experiments/saved_config.py) and leaves the file as it was."""
    copy = _unfinished_copy(stopped_run, tmp_path)
    config_path = os.path.join(copy, ".hydra", "config.yaml")
    with open(config_path) as file:
        saved = file.read()
    assert "_target_: rl.local.LocalLauncher" in saved
    old = saved.replace("rl.local.LocalLauncher", "rl.experiments.launchers.local.LocalLauncher")
    with open(config_path, "w") as file:
        file.write(old)
    result = run_train([f"resume={copy}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Resuming {copy} from step_{BUDGET} " in result.stdout
    summary = read_summary(copy)
    assert summary["status"] == "finished" and summary["actor_steps"] == BUDGET
    with open(config_path) as file:
        assert file.read() == old


def _refused(arguments: list[str], run_dir: str, status: int, message: str) -> None:
    before = _fingerprint(run_dir)
    result = run_train(arguments, timeout=600)
    assert result.returncode == status, (result.returncode, result.stderr[-3000:])
    lines = _our_lines(result.stderr)
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert _fingerprint(run_dir) == before


def test_another_network_shape_is_refused(stopped_run):
    run_dir = stopped_run["run_dir"]
    _refused(
        [*stopped_run["command"], "network.hidden_sizes=[32,32]"],
        run_dir,
        2,
        f"Invalid configuration: network.hidden_sizes: is [32, 32] but the run in {run_dir} used [64, 64]",
    )


def test_damaged_or_missing_checkpoints_are_refused(stopped_run, tmp_path):
    from omegaconf import OmegaConf

    from rl.checkpointing import CheckpointError
    from rl.experiments.make_experiment import make_experiment
    from rl.experiments.resume import prepare_run

    copy = _unfinished_copy(stopped_run, tmp_path)
    for path in checkpointing.list_checkpoints(copy):
        _corrupt(path)
    _refused([*COMMAND, f"hydra.run.dir={copy}"], copy, 1, "Cannot resume: no usable checkpoint in")
    # With no checkpoint left at all, asking to resume is refused the same way (train.py
    # prints it as "Cannot resume: ..."); checked in this process to keep the suite short.
    shutil.rmtree(os.path.join(copy, "checkpoints"))
    before = _fingerprint(copy)
    config = OmegaConf.load(os.path.join(copy, ".hydra", "config.yaml"))
    config.resume = copy
    experiment, _ = make_experiment(config, copy)
    with pytest.raises(CheckpointError, match=f"no checkpoint to resume in {copy}/checkpoints"):
        prepare_run(experiment, config, copy, explicit=True)
    assert _fingerprint(copy) == before


def test_a_resume_path_that_does_not_exist_is_refused(tmp_path):
    missing = str(tmp_path / "missing")
    result = run_train([*COMMAND, f"resume={missing}"], timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == f"Invalid configuration: resume: no run directory at {missing}"
    assert os.listdir(tmp_path) == []


def test_rate_limiter_settings_that_can_never_sample_are_refused(tmp_path):
    from hydra import compose, initialize_config_dir

    from rl.experiments.make_experiment import make_experiment

    from rl.experiments.validation import ConfigError

    run_dir = str(tmp_path / "run")
    result = run_train([*COMMAND, "agent.samples_per_insert=0.01", f"hydra.run.dir={run_dir}"], timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert _our_lines(result.stderr) == [
        "Invalid configuration: agent.samples_per_insert: 0.01 samples per insert never add up to one learner batch "
        "of 128 items within the run (700 inserts after agent.min_replay_size=100): the learner could never sample; "
        "raise samples_per_insert or lower the batch size"
    ]
    assert not os.path.exists(run_dir)  # The refused command took back the directory Hydra made for it.
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=["agent.min_replay_size=2000", "agent.max_replay_size=1000"])
    with pytest.raises(ConfigError, match=r"min_replay_size \(2000\) must be <= max_replay_size \(1000\)"):
        make_experiment(config, run_dir)


def test_resume_alone_continues_a_killed_preset_run_from_past_half_its_budget_with_its_own_config(tmp_path):
    """Default checkpoint settings: a checkpoint follows every evaluation round, so `experiment=dqn_cartpole`
    killed (SIGKILL) at 70% of its budget resumes from past 50% of it; `resume=DIR` alone brings back the
    run's own overrides (the preset, its seed) and the run ends at exactly its budget."""
    run_dir = str(tmp_path / "killed")
    budget = 10_000  # Shorter than the preset's, with its rounds closer (a checkpoint follows each).
    command = ["experiment=dqn_cartpole", "seed=3", f"max_actor_steps={budget}", "eval_every=1000", "eval_episodes=2"]
    command.append("progress=false")
    process = start_train([*command, f"hydra.run.dir={run_dir}"])
    _wait_until(lambda: _acted_past(run_dir, 0), process)
    _wait_throttled(lambda: _acted_past(run_dir, budget * 7 // 10), process)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    result = run_train([f"resume={run_dir}"], timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (resumed,) = re.findall(r"from step_(\d+) \((\d+) actor steps", result.stdout)
    assert budget // 2 < int(resumed[1]) <= budget * 7 // 10 + 500, result.stdout[-2000:]
    summary = read_summary(run_dir)
    assert summary["actor_steps"] == budget and summary["status"] == "finished"
    # Composed as the run was (else its config check refuses: the preset's batch size is not the default's).
    with open(os.path.join(run_dir, ".hydra", "overrides.yaml")) as file:
        assert yaml.safe_load(file) == command
    with open(os.path.join(run_dir, "run.json")) as file:
        assert json.load(file)["sessions"] == 2
