"""Sweeps: an Optuna search with the DQN preset, and parallel jobs under the joblib launcher."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from conftest import TRAIN, read_summary, read_wandb_offline_run, run_train

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

TINY = ["eval_episodes=2", "agent.min_replay_size=200", "progress=false"]


def test_optuna_sweep_maximises_final_eval_return_and_names_best_parameters(tmp_path):
    sweep = tmp_path / "optuna"
    result = run_train(
        [
            "-m",
            "hydra/sweeper=dqn_optuna",
            "hydra.sweeper.n_trials=2",
            "max_actor_steps=800",
            "eval_every=800",
            "logger=csv",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(sweep / "optimization_results.yaml") as file:
        results = yaml.safe_load(file)
    best = results["best_params"]
    finals = [read_summary(str(sweep / job))["final_eval_return"] for job in ("0", "1")]
    assert results["best_value"] == max(finals)  # Maximised, and what train.py returned.
    winner = str(finals.index(max(finals)))
    with open(sweep / winner / ".hydra" / "overrides.yaml") as file:
        overrides = dict(line.split("=", 1) for line in yaml.safe_load(file))
    assert best == {  # Exactly the winning job's parameters.
        "agent.learning_rate": float(overrides["agent.learning_rate"]),
        "agent.n_step": int(overrides["agent.n_step"]),
        "agent.target_update_period": int(overrides["agent.target_update_period"]),
    }
    # results.yaml names every trial's directory and value, and the best one's command line.
    with open(sweep / "results.yaml") as file:
        report = yaml.safe_load(file)
    assert [trial["value"] for trial in report["trials"]] == finals
    assert report["best"]["job"] == winner and report["best"]["directory"] == str(sweep / winner)
    assert report["best"]["command"].startswith(f"python {TRAIN} agent.learning_rate=")  # As typed.
    assert "results.yaml" in result.stdout
    # Two trials are within TPE's random start-up trials: the sweep says so.
    assert "n_trials=2 is within the sampler's n_startup_trials=10: every trial is sampled at random" in result.stderr


def test_joblib_launcher_runs_jobs_in_parallel_with_one_wandb_group(tmp_path):
    sweep = tmp_path / "parallel"
    result = run_train(
        [
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            "seed=0,1",
            "max_actor_steps=600",
            "eval_every=600",
            "logger=wandb",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [read_wandb_offline_run(str(sweep / job)) for job in ("0", "1")]
    assert [run["config"]["seed"] for run in runs] == [0, 1]
    # <agent>-<environment>-<sweep>-<id>: the sweep directory's name and this sweep's id stand in
    # for its date and time when it has none (rl.loggers.wandb.default_group).
    (group,) = {run["group"] for run in runs}
    assert re.fullmatch(r"dqn-CartPole-v1-parallel-[0-9a-f]{6}", group), group
    assert {run["exit_code"] for run in runs} == {0}
    for job in ("0", "1"):
        assert os.path.exists(sweep / job / "summary.json") and os.path.isdir(sweep / job / "logs")


def test_a_refused_job_is_reported_in_its_train_log_and_the_sweep_goes_on_to_list_it(tmp_path):
    sweep = tmp_path / "refusals"
    result = run_train(
        [
            "-m",
            "max_actor_steps=-5,400",
            "eval_every=200",
            "objective=eval_return_auc",
            "logger=csv",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
        timeout=600,
    )
    assert result.returncode == 2, result.stderr[-3000:]  # Some job was refused ...
    assert read_summary(str(sweep / "1"))["status"] == "finished"  # ... and the next one still ran.
    message = "Invalid configuration: max_actor_steps: must be a positive integer, got -5"
    assert message in (sweep / "0" / "train.log").read_text()
    assert not (sweep / "0" / "summary.json").exists() and not (sweep / "1" / "refused.txt").exists()
    listing = result.stderr.split(f"1 job(s) of the sweep in {sweep} were refused:\n", 1)[1]
    assert listing.splitlines()[0] == f"  0: {message}"
    # Each job's terminal lines start with its number (parallel jobs' lines interleave); train.log's do not.
    assert f"[job 0] {message}" in result.stderr.splitlines()
    ours = [line for line in result.stdout.splitlines() if line.startswith("[") and not line.startswith("[20")]
    assert ours and all(line.startswith("[job 1] ") for line in ours), ours
    assert "[job" not in (sweep / "1" / "train.log").read_text()
    with open(sweep / "results.yaml") as file:
        report = yaml.safe_load(file)
    assert [trial["job"] for trial in report["trials"]] == ["1"] and report["refused"] == {"0": message}
    # Ranked by the run's objective (here the mean return along the evaluation curve).
    assert report["trials"][0]["value"] == read_summary(str(sweep / "1"))["eval_return_auc"]
