"""Optuna searches that prune: a trial reports every evaluation to a real sqlite study and stops when
the study's pruner says so, with status `pruned` in summary.json, its W&B run, the study and
results.yaml; the sweep goes on, in one process (Hydra's basic launcher) or several (joblib)."""

from __future__ import annotations

import glob
import json
import math
import os
import re

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import read_summary, read_wandb_offline_run, run_train, wandb_records
from rl.sweeps.pruning import DIRECTORY_ATTRIBUTE, PRUNER_ATTRIBUTE, OptunaTrial, PruningHook, open_storage

TINY = ["eval_every=200", "eval_episodes=2", "agent.min_replay_size=200", "progress=false"]
# Every evaluation is below the threshold, but those before 300 actor steps are not judged: a run
# of 400 steps completes (its last round ends it), one of 2,000 is pruned at 400, before half its budget.
PRUNE_AFTER_300 = [
    "hydra/sweeper=optuna_pruning",
    "hydra/sweeper/pruner=threshold",
    "hydra.sweeper.pruner.lower=1e9",
    "hydra.sweeper.pruner.n_warmup_steps=300",
]


def trials_of(sweep: str) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(f"sqlite:///{sweep}/optuna.db")
    (study,) = storage.get_all_study_summaries()
    return optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)


def wandb_summary(run_dir: str) -> dict:
    """The last value of each key of the offline W&B run's summary records."""
    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    summary = {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "summary":
            summary.update({item.key: json.loads(item.value_json) for item in record.summary.update})
    return summary


def budget_of(job_dir: str) -> int:
    with open(os.path.join(job_dir, ".hydra", "overrides.yaml")) as file:
        overrides = dict(line.split("=", 1) for line in yaml.safe_load(file))
    return int(overrides["max_actor_steps"])


@pytest.mark.reverb
def test_a_pruned_trial_stops_before_half_its_budget_and_the_search_goes_on(tmp_path):
    sweep = str(tmp_path / "search")
    result = run_train(
        [
            "-m",
            *PRUNE_AFTER_300,
            "hydra/sweeper/sampler=grid",  # Each budget once, in either order.
            "max_actor_steps=choice(400,2000)",
            "logger=wandb",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The launcher's job lines show what each job varies, not the search's storage, study and trial variables.
    job_lines = [line for line in result.stdout.splitlines() if re.search(r"#\d+ : ", line)]
    assert len(job_lines) == 2 and not any("env_set" in line for line in job_lines), job_lines
    # The best line counts the pruned job apart.
    assert re.search(r"^Best of 1 jobs, 1 pruned left out: ", result.stdout, re.MULTILINE), result.stdout[-2000:]
    jobs = {budget_of(os.path.join(sweep, job)): os.path.join(sweep, job) for job in ("0", "1")}
    pruned, finished = read_summary(jobs[2000]), read_summary(jobs[400])
    assert pruned["status"] == "pruned" and pruned["actor_steps"] == 400 < 2000 / 2
    assert [steps for steps, _ in pruned["eval_returns"]] == [0, 200, 400]
    assert finished["status"] == "finished" and finished["actor_steps"] == 400
    # The pruned run ended cleanly: W&B run finished (exit 0) with status pruned, no checkpoint written.
    assert wandb_summary(jobs[2000])["status"] == "pruned"
    assert read_wandb_offline_run(jobs[2000])["exit_code"] == 0
    assert not glob.glob(os.path.join(jobs[2000], "checkpoints", "step_*"))
    assert "pruned by the search: last evaluation return" in open(os.path.join(jobs[2000], "train.log")).read()
    # The study (sqlite in the sweep directory) holds both trials as they ended, with every evaluation.
    by_budget = {trial.params["max_actor_steps"]: trial for trial in trials_of(sweep)}
    assert by_budget[2000].state == TrialState.PRUNED and by_budget[400].state == TrialState.COMPLETE
    for budget, trial in by_budget.items():
        summary = read_summary(jobs[budget])
        # Every round but the untrained policy's at step 0, which no pruner is told of.
        assert trial.intermediate_values == {int(s): v for s, v in summary["eval_returns"] if s > 0}
        assert trial.user_attrs[DIRECTORY_ATTRIBUTE] == jobs[budget]
    assert by_budget[400].value == finished["final_eval_return"]
    # The search's results: best trial (never a pruned one), its config, plots; results.yaml's statuses.
    with open(os.path.join(sweep, "optimization_results.yaml")) as file:
        results = yaml.safe_load(file)
    assert results["trials"] == {"complete": 1, "pruned": 1, "fail": 0}
    assert results["best_params"] == {"max_actor_steps": 400} and results["best_directory"] == jobs[400]
    assert results["pruner"]["_target_"] == "optuna.pruners.ThresholdPruner"
    with (
        open(os.path.join(sweep, "best_config.yaml")) as a,
        open(os.path.join(jobs[400], ".hydra", "config.yaml")) as b,
    ):
        assert a.read() == b.read()
    for plot in ("optimization_history.png", "intermediate_values.png"):
        with open(os.path.join(sweep, plot), "rb") as file:
            assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(sweep, "results.yaml")) as file:
        report = yaml.safe_load(file)
    assert {trial["directory"]: trial["status"] for trial in report["trials"]} == {
        jobs[2000]: "pruned",
        jobs[400]: "finished",
    }
    assert report["best"]["directory"] == jobs[400]


@pytest.mark.reverb
def test_trials_in_separate_processes_share_one_study(tmp_path):
    sweep = str(tmp_path / "parallel")
    result = run_train(
        [
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            *PRUNE_AFTER_300,
            "hydra.sweeper.n_jobs=2",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.sampler.seed=0",
            "agent.learning_rate=interval(1e-4,1e-3)",
            "max_actor_steps=1000",
            "logger=csv",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [read_summary(os.path.join(sweep, job)) for job in ("0", "1")]
    assert [(s["status"], s["actor_steps"]) for s in summaries] == [("pruned", 400)] * 2
    trials = trials_of(sweep)
    assert [trial.state for trial in trials] == [TrialState.PRUNED] * 2
    assert sorted(trial.user_attrs[DIRECTORY_ATTRIBUTE] for trial in trials) == [f"{sweep}/0", f"{sweep}/1"]
    with open(os.path.join(sweep, "optimization_results.yaml")) as file:
        results = yaml.safe_load(file)
    assert results["trials"] == {"complete": 0, "pruned": 2, "fail": 0} and "best_params" not in results
    # No trial completed: no history of values to plot, but both evaluation curves.
    assert not os.path.exists(os.path.join(sweep, "optimization_history.png"))
    assert os.path.getsize(os.path.join(sweep, "intermediate_values.png")) > 0


def test_the_median_pruner_stops_a_trial_below_the_completed_trials_median(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="s", storage=open_storage(url), direction="maximize")
    study.set_user_attr(PRUNER_ATTRIBUTE, {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 2})
    for value in (100.0, 200.0):  # Two completed trials: the median at step 500 is 150.
        trial = study.ask()
        trial.report(value, 500)
        study.tell(trial, value)
    low, high = study.ask().number, study.ask().number
    below = OptunaTrial(url, "s", low, str(tmp_path / "low"))
    assert below.report(500, 120.0) is True
    below.prune()
    above = OptunaTrial(url, "s", high)
    assert above.report(500, 180.0) is False
    assert above.report(1000, math.nan) is False  # A non-finite return is not reported.
    trials = optuna.load_study(study_name="s", storage=open_storage(url)).get_trials(deepcopy=False)
    assert trials[low].state == TrialState.PRUNED and trials[low].value == 120.0
    assert trials[low].user_attrs[DIRECTORY_ATTRIBUTE] == str(tmp_path / "low")
    assert trials[high].state == TrialState.RUNNING and trials[high].intermediate_values == {500: 180.0}


def test_a_run_outside_a_search_is_no_trial():
    """One reader of the sweeper's environment variables: `PruningHook.from_environment` (a run's hook, and in a
    grid each replica's)."""
    assert PruningHook.from_environment(None, {}) is None
    assert not hasattr(OptunaTrial, "from_environment")


def test_a_trial_is_a_hook_of_its_run_opened_when_the_run_starts(tmp_path):
    """What the lifecycle calls (rl/experiments/hooks.py): the trial opens at the start, hears every round and
    is pruned when the run ends on its word; the hook travels as plain names until then."""
    url = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="s", storage=open_storage(url), direction="maximize")
    study.set_user_attr(PRUNER_ATTRIBUTE, {"_target_": "optuna.pruners.ThresholdPruner", "lower": 100.0})
    number = study.ask().number
    environment = {"RL_OPTUNA_STORAGE": url, "RL_OPTUNA_STUDY": "s", "RL_OPTUNA_TRIAL": str(number)}
    hook = PruningHook.from_environment(str(tmp_path / "run"), environment)
    assert hook.may_end_early and hook.trial is None
    hook.start()
    assert hook.after_evaluation(500, 150.0) is False
    assert hook.after_evaluation(1000, 50.0) is True
    hook.ended_early()
    trial = optuna.load_study(study_name="s", storage=open_storage(url)).get_trials(deepcopy=False)[number]
    assert trial.state == TrialState.PRUNED and trial.intermediate_values == {500: 150.0, 1000: 50.0}
    assert trial.user_attrs[DIRECTORY_ATTRIBUTE] == str(tmp_path / "run")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["hydra/sweeper/pruner=halving", "hydra.sweeper.pruner.reduction_factor=1"],
            "The value of `reduction_factor` is 1, but must be `reduction_factor >= 2`",
        ),
        (
            ["hydra/sweeper/pruner=hyperband"],
            "hydra/sweeper/pruner=hyperband: no such option of the config group hydra/sweeper/pruner; "
            "its options: halving, median, none, threshold",
        ),
    ],
)
def test_a_bad_pruner_is_refused_in_one_line_before_any_job(tmp_path, overrides, message):
    sweep = tmp_path / "refused"
    result = run_train(["-m", "hydra/sweeper=dqn_optuna", *overrides, f"hydra.sweep.dir={sweep}"], timeout=120)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Invalid configuration: ") and message in line
    if "reduction_factor" in message:  # A factory's own refusal: the key OmegaConf names leads the line.
        assert line.startswith("Invalid configuration: hydra.sweeper.pruner: "), line
    assert not sweep.exists()


def test_a_search_over_seeds_names_the_best_setting_by_its_mean_over_seeds(tmp_path):
    """The best trial (lr 1e-3 seed 0, 500) is not in the best setting (lr 3e-4: 450 and 440, mean 445
    against 500 and 100, mean 300): optimization_results.yaml names both, as results.yaml ranks settings."""
    from rl.sweeps.optuna_sweeper import write_results

    study = optuna.create_study(direction="maximize")
    space = {
        "agent.learning_rate": optuna.distributions.CategoricalDistribution([1e-3, 3e-4]),
        "seed": optuna.distributions.CategoricalDistribution([0, 1]),
    }
    for (rate, seed), value in {(1e-3, 0): 500.0, (1e-3, 1): 100.0, (3e-4, 0): 450.0, (3e-4, 1): 440.0}.items():
        params = {"agent.learning_rate": rate, "seed": seed}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=space, value=value))
    write_results(study, str(tmp_path), "sqlite:///memory", {"_target_": "optuna.pruners.NopPruner"})
    with open(tmp_path / "optimization_results.yaml") as file:
        results = yaml.safe_load(file)
    assert results["best_trial"] == 0 and results["best_value"] == 500.0
    best = results["best_setting"]
    assert best["overrides"] == ["agent.learning_rate=0.0003"] and best["jobs"] == {"2": 450.0, "3": 440.0}
    assert (best["mean"], best["min"], best["max"], best["count"]) == (445.0, 440.0, 450.0, 2)
