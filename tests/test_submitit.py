"""Sweeps on a cluster: hydra-submitit-launcher's jobs stop on submitit's requeue signal and resume.

The sweep runs through the real entry point with submitit's local executor
(`hydra/launcher=submitit_local`): a controller process starts the job as a subprocess, as SLURM's
srun would. The job is sent SIGUSR2, the signal SLURM sends before a time limit or a pre-emption,
after its first checkpoint and evaluation: the run stops with a checkpoint, submitit's handler calls
the launcher's `checkpoint()` and requeues the job (the local controller starts it again, as SLURM
does after `scontrol requeue`), and the requeued job finds its run directory and resumes it to
exactly its budget. The sweep directory is time-stamped, like Hydra's default, to show that a
requeued job gets the original submission's directory rather than one of its own time.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, TRAIN, read_summary, run_train
from test_resume import _wandb_runs
from rl import checkpointing

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

BUDGET = 800
EVERY = BUDGET // 4
COMMAND = [
    "-m",
    "hydra/launcher=submitit_local",
    "experiment=dqn_cartpole",
    f"max_actor_steps={BUDGET}",
    f"eval_every={EVERY}",
    "eval_episodes=1",
    "agent.min_replay_size=100",
    "network.hidden_sizes=[64,64]",
    "progress=false",
    "checkpoint.every_seconds=0.5",
    "checkpoint.replay=true",
    "logger=wandb",
]


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def _job_processes(folder: str) -> list[int]:
    """The pids of the submitit jobs (`python -m submitit.core._submit <folder>/...`) running now."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                arguments = file.read().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue
        if "submitit.core._submit" in arguments and any(a.startswith(folder) for a in arguments):
            pids.append(int(entry))
    return pids


def _evaluated(job_dir: str, steps: int) -> bool:
    path = os.path.join(job_dir, "logs", "evaluator.csv")
    return os.path.exists(path) and any(int(row["actor_steps"]) >= steps for row in _rows(path))


@pytest.fixture(scope="module")
def requeued(tmp_path_factory):
    """The sweep of the module docstring: one job, signalled once, run to its end."""
    base = str(tmp_path_factory.mktemp("submitit"))
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    sweep = subprocess.Popen(
        [sys.executable, TRAIN, *COMMAND, f"hydra.sweep.dir={base}/${{now:%H-%M-%S-%f}}"],
        cwd=ROOT,
        env=environment,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while not (jobs := _job_processes(base)) or not glob.glob(os.path.join(base, "*", "0", "logs", "actor.csv")):
        assert sweep.poll() is None, sweep.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the job did not start acting in time"
        time.sleep(0.1)
    (pid,) = jobs
    (job_dir,) = glob.glob(os.path.join(base, "*", "0"))
    # Signalled as soon as it has evaluated once and written a checkpoint, three quarters of its budget
    # (seconds of work) before its end. Not throttled with SIGSTOP/SIGCONT as in test_resume.py: submitit
    # logs every SIGCONT from its signal handler, and a stream of them breaks the job's logging.
    while not (_evaluated(job_dir, EVERY) and checkpointing.list_checkpoints(job_dir)):
        assert sweep.poll() is None, sweep.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the job did not get there in time"
        time.sleep(0.02)
    os.kill(pid, signal.SIGUSR2)  # What SLURM sends signal_delay_s before the time limit.
    stdout, stderr = sweep.communicate(timeout=600)
    return {"returncode": sweep.returncode, "stdout": stdout, "stderr": stderr, "job_dir": job_dir, "pid": pid}


def test_a_signalled_job_is_requeued_and_resumes_to_exactly_its_budget(requeued):
    assert requeued["returncode"] == 0, requeued["stderr"][-3000:]
    job_dir = requeued["job_dir"]
    sweep_dir = os.path.dirname(job_dir)
    with open(os.path.join(job_dir, "run.json")) as file:
        run = json.load(file)
    stopped = run["history"][1]["restored_from"]
    stop_step = checkpointing.step_of(stopped)
    assert [entry["restored_from"] for entry in run["history"]] == [None, stopped]  # Two sessions, one run.
    assert EVERY <= stop_step < BUDGET  # Stopped mid-run, after its first evaluation.

    with open(os.path.join(job_dir, "train.log")) as file:
        log = file.read()
    stop_line = (
        f"Interrupted: stopped by SIGUSR2 at {stop_step} actor steps; checkpoint {job_dir}/checkpoints/{stopped}; "
        "submitit requeues the job, which resumes it"
    )
    resume_line = f"Resuming {job_dir} from {stopped} ({stop_step} actor steps, "
    assert stop_line in log and resume_line in log, log[-3000:]
    assert log.index(stop_line) < log.index("Calling checkpoint method") < log.index("Requeued job")
    assert log.index("Requeued job") < log.index(resume_line)
    assert "; replay buffer restored)" in log[log.index(resume_line) :].splitlines()[0]
    # The second session ran in a new process, started by submitit from the pickle `checkpoint()` wrote.
    (submitted,) = glob.glob(os.path.join(sweep_dir, ".submitit", "*", "*_submitted.pkl"))
    with open(submitted.replace("_submitted.pkl", "_0_log.out")) as file:
        assert file.read().count("Loading pickle") == 2

    summary = read_summary(job_dir)
    assert summary["status"] == "finished"
    assert summary["actor_steps"] == BUDGET
    steps = [step for step, _ in summary["eval_returns"]]
    assert steps == list(range(0, BUDGET + 1, EVERY))  # One curve: every round once, none missing.
    evaluations = _rows(os.path.join(job_dir, "logs", "evaluator.csv"))
    assert [int(row["actor_steps"]) for row in evaluations] == steps
    assert [float(row["episode_return"]) for row in evaluations] == [value for _, value in summary["eval_returns"]]
    final = checkpointing.read_state(checkpointing.list_checkpoints(job_dir)[0])
    assert final["actor_steps"] == final["actor_schedule_step"] == BUDGET and final["session"] == 1

    runs = _wandb_runs(job_dir)  # One W&B run: stopped by SIGUSR2 (128 + 12), then finished.
    assert [identifier for identifier, _ in runs] == [run["wandb_run_id"]] * 2
    assert [code for _, code in runs] == [128 + signal.SIGUSR2, 0]
    with open(os.path.join(sweep_dir, "results.yaml")) as file:  # What the sweeper got: the finished run's.
        assert f"value: {summary['final_eval_return']}" in file.read()


def test_the_slurm_preset_sets_our_defaults_and_leaves_the_partition_to_the_user():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
        mine = compose(
            config_name="config",
            overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.account=lab"],
            return_hydra_config=True,
        )
    launcher = config.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.timeout_min, launcher.signal_delay_s, launcher.max_num_timeout) == (240, 300, 20)
    assert (launcher.cpus_per_task, launcher.mem_gb, launcher.tasks_per_node) == (4, 16, 1)
    assert launcher.partition is None and dict(launcher.additional_parameters) == {"requeue": True}
    assert (mine.hydra.launcher.partition, mine.hydra.launcher.account) == ("gpu", "lab")


def test_a_slurm_sweep_where_there_is_no_slurm_is_one_line(tmp_path):
    bin_dir = os.path.dirname(sys.executable)  # No srun on this PATH, whatever the machine.
    result = run_train(
        ["-m", "hydra/launcher=slurm", f"hydra.sweep.dir={tmp_path}/sweep", "seed=0,1"],
        timeout=120,
        env={"PATH": bin_dir},
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "hydra/launcher=slurm: SLURM's srun is not on this machine's PATH; submit from the cluster "
        "(hydra/launcher=submitit_local runs the same jobs here)"
    )
    assert os.listdir(tmp_path) == []


def test_the_requeue_signal_asks_for_a_clean_stop_and_never_cuts_one_short(monkeypatch):
    from rl.experiments.signals import REPEAT_S, Interrupted, StopRequest

    def submitits_handler(signum, frame):  # What submitit installs before the job starts (never called here).
        raise AssertionError("the run's handler should have had the signal")

    previous = signal.signal(signal.SIGUSR2, submitits_handler)
    try:
        monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
        stop = StopRequest()  # Outside a submitit job SIGUSR2 is not the run's.
        assert signal.getsignal(signal.SIGUSR2) is submitits_handler
        stop.restore()

        monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
        stop = StopRequest()
        signal.raise_signal(signal.SIGTERM)  # A pre-emption's SIGTERM, then its SIGUSR2: one clean stop that requeues.
        signal.raise_signal(signal.SIGUSR2)
        signal.raise_signal(signal.SIGUSR2)
        assert stop.signum == signal.SIGUSR2
        time.sleep(REPEAT_S)  # The time limit's SIGTERM comes later, not as the first one sent twice.
        with pytest.raises(Interrupted):  # SIGTERM after it (the time limit itself): stop now.
            signal.raise_signal(signal.SIGTERM)
        stop.restore()
        assert signal.getsignal(signal.SIGUSR2) is submitits_handler  # Back for the entry point to hand it on.
    finally:
        signal.signal(signal.SIGUSR2, previous)
