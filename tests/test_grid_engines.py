"""hydra/launcher=anakin_grid's engines (rl/sweeps/engines.py): the driver prepares the jobs and forms the groups,
a Ray task or a submitit array task trains each group; every job's records and value, and the sweep's
results.yaml, are what the same grid gives on one machine (engine=local)."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import types

import pytest
import yaml

from conftest import read_summary, read_wandb_offline_run, run_train
from test_grid import SHORT

# Two groups (num_envs is structural), each batching the learning rate: 4 jobs, 2 programs.
GRID = [
    "-m",
    "hydra/launcher=anakin_grid",
    *SHORT,
    "environment.num_envs=4,8",
    "agent.learning_rate=2.5e-4,1e-3",
    "logger=csv",
]


def _results(sweep) -> dict[str, float]:
    with open(sweep / "results.yaml") as file:
        return {trial["job"]: trial["value"] for trial in yaml.safe_load(file)["trials"]}


def _run_grid(sweep, *overrides: str) -> str:
    result = run_train([*GRID, *overrides, f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _check_as_on_one_machine(sweep, local) -> None:
    """Each group's summary.json, each job's, and one results.yaml whose values are the local grid's, bit for bit."""
    groups = sorted(os.listdir(sweep / ".grid"))
    assert groups == sorted(os.listdir(local / ".grid")) and len(groups) == 2
    for group in groups:
        assert read_summary(str(sweep / ".grid" / group))["num_seeds"] == 2
    for job in ("0", "1", "2", "3"):
        ours, theirs = read_summary(str(sweep / job)), read_summary(str(local / job))
        assert ours["status"] == "finished" and ours["actor_steps"] == 8192
        assert ours["eval_returns"] == theirs["eval_returns"]
        assert ours["grid"]["batched"] == ["agent.learning_rate"] and ours["grid"]["group"].startswith(str(sweep))
        assert "final evaluation return" in (sweep / job / "train.log").read_text()
    assert _results(sweep) == _results(local) and len(_results(sweep)) == 4
    assert list(sweep.glob("**/results.yaml")) == [sweep / "results.yaml"]  # One, the sweep's.


@pytest.mark.ray
@pytest.mark.reverb  # Ray is the reverb stack's; the current stack has none.
def test_a_grid_on_a_two_node_ray_cluster_gives_what_one_machine_gives(tmp_path):
    from ray.cluster_utils import Cluster

    _run_grid(tmp_path / "local")
    # Two nodes on this machine's address (a driver of Ray 2.60 finds no node of its host bound to 127.0.0.1), one
    # CPU each: each group's task, asking for one, takes a node of its own.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        output = _run_grid(
            tmp_path / "ray", "hydra.launcher.engine=ray", f"hydra.launcher.ray.address={cluster.address}"
        )
    finally:
        cluster.shutdown()
    placed = dict(re.findall(r"group (\S+) trained on Ray node (\w+)", output))
    assert sorted(placed) == sorted(os.listdir(tmp_path / "ray" / ".grid")) and len(set(placed.values())) == 2
    _check_as_on_one_machine(tmp_path / "ray", tmp_path / "local")


@pytest.mark.current  # No Ray: the current stack's part runs it (submitit is in both stacks).
def test_a_grid_as_a_submitit_job_array_gives_what_one_machine_gives(tmp_path):
    _run_grid(tmp_path / "local")
    engine = ["hydra.launcher.engine=submitit", "hydra.launcher.submitit.cluster=local"]
    output = _run_grid(tmp_path / "submitit", *engine, "logger=wandb")
    submitted = re.findall(r"group (\S+): submitit job (\S+) \(local\)", output)
    assert len(submitted) == 2
    for _, job_id in submitted:  # submitit's own logs of each array task, in the sweep directory.
        assert os.path.isfile(tmp_path / "submitit" / ".submitit" / job_id / f"{job_id}_0_log.out")
    _check_as_on_one_machine(tmp_path / "submitit", tmp_path / "local")
    # While the tasks ran, this terminal said each group's state and, read from its jobs' records, each setting's
    # rounds (here at least the last: the round its worker said in submitit's log).
    lines = output.splitlines()
    for group, job_id in submitted:
        assert f"group {group}: running (submitit job {job_id})" in lines
        assert f"group {group}: finished (submitit job {job_id})" in lines
        with open(tmp_path / "submitit" / ".submitit" / job_id / f"{job_id}_0_log.out") as file:
            told = [
                line.rstrip("\n").split("] ", 1)[1] for line in file if line.startswith(f"[group {group}] 8192/8192 ")
            ]
        assert len(told) == 2 and all(f"[group {group}] {line}" in lines for line in told)
    runs = {job: read_wandb_offline_run(str(tmp_path / "submitit" / job)) for job in ("0", "1", "2", "3")}
    assert len({run["group"] for run in runs.values()}) == 1  # The sweep's group, as the driver named it.
    for job, run in runs.items():
        with open(tmp_path / "submitit" / job / "run.json") as file:
            run_id = json.load(file)["wandb_run_id"]  # The id the driver gave the job.
        assert len(list((tmp_path / "submitit" / job / "wandb").glob(f"offline-run-*-{run_id}"))) == 1
        assert run["exit_code"] == 0 and run["name"].endswith(f"__{job}")
        curve = [row["evaluator/episode_return"] for row in run["history"] if "evaluator/episode_return" in row]
        assert curve == [value for _, value in read_summary(str(tmp_path / "submitit" / job))["eval_returns"]]


def test_a_group_that_fails_on_its_worker_gives_its_jobs_nan_and_the_error_in_their_logs(tmp_path, caplog):
    """An array of two submitit tasks (the local executor) whose worker fails on the second group: that group's
    outcome is its error in one line, the first's its values; `fail_group` then fails the group's jobs alone."""
    from rl.sweeps.engines import SubmititEngine
    from rl.sweeps.grid import GridJob, GroupPlan, fail_group
    from rl.sweeps.jobs import Job

    engine = SubmititEngine(folder=str(tmp_path / "submitit" / "%j"), cluster="local")
    good, bad = engine.run(sorted, [[2.0, 1.0], ["a", 1.0]], ["0_0_0", "2_1_0"])  # sorted: a worker any task imports.
    assert good == [1.0, 2.0]
    assert bad.startswith("its group 2_1_0 failed as submitit job") and "): TypeError: '<' not supported" in bad

    caplog.set_level(logging.INFO, logger="rl.transcript")  # As Hydra's job_logging sets it (train.log).
    experiment = types.SimpleNamespace(agent_name="ppo", environment_name="CartPole-v1", seed=0, threshold=None)
    jobs = []
    for number in (2, 3):
        os.makedirs(tmp_path / str(number))
        job = Job(experiment, None, str(tmp_path / str(number)), "final_eval_return")
        jobs.append(GridJob(number, job, str(tmp_path / str(number) / "train.log"), {}))
    values = fail_group(GroupPlan(str(tmp_path / ".grid" / "2_1_0"), jobs, ["agent.learning_rate"]), bad)
    assert all(math.isnan(value) for value in values) and len(values) == 2
    for number in ("2", "3"):
        summary = read_summary(str(tmp_path / number))
        assert summary["status"] == "failed" and summary["failure"] == bad and summary["grid"]["jobs"] == 2
        assert f"Run failed: {bad}" in (tmp_path / number / "train.log").read_text()


def test_a_ray_address_where_nothing_answers_is_refused_before_any_job_is_prepared(tmp_path):
    """A host:port with no cluster behind it: one line, exit status 2, no job's directory (Ray is not imported:
    the check is a connection to the address)."""
    sweep = str(tmp_path / "sweep")
    result = run_train(
        ["-m", "hydra/launcher=anakin_grid", "hydra.launcher.engine=ray", "hydra.launcher.ray.address=127.0.0.1:9",
         "hydra.launcher.ray.connect_timeout_s=2", "experiment=ppo_gymnax_cartpole", "seed=0,1",
         f"hydra.sweep.dir={sweep}"],
        timeout=300,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(
        "Invalid configuration: hydra.launcher.ray.address: no Ray cluster answers at 127.0.0.1:9"
    )
    assert not os.path.exists(os.path.join(sweep, "0"))
