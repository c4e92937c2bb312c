"""summary.json's status and threshold fields, wall_time_s in every record (CSV and W&B)
and evaluations from several evaluators, through the real entry point."""

import csv
import math
import os
from types import SimpleNamespace

import pytest

from conftest import ROOT, read_summary, read_wandb_offline_run, run_train
from rl.experiments.summary import RunSummary, first_reaching
from rl.experiments.validation import ConfigError, check_run_settings

TINY = [
    "max_actor_steps=1500",
    "eval_every=500",
    "eval_episodes=2",
    "agent.min_replay_size=200",
    "progress=false",
    "checkpoint=false",
]
LABELS = ("actor", "learner", "evaluator")


def _rows(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_first_reaching_takes_the_first_evaluation_at_or_above_the_threshold():
    curve = [(500, 10.0), (1000, 475.0), (1500, 500.0)]
    assert first_reaching(475.0, curve, [1.0, 2.5, 3.0]) == (2.5, 1000)
    assert first_reaching(501.0, curve, [1.0, 2.5, 3.0]) == (None, None)
    assert first_reaching(None, curve, [1.0, 2.5, 3.0]) == (None, None)
    assert first_reaching(5.0, curve, None) == (None, 500)


def test_summary_threshold_fields_are_null_without_a_threshold_or_when_unreached():
    experiment = SimpleNamespace(agent_name="dqn", environment_name="CartPole-v1", seed=0, threshold=None)
    counts = {"actor_steps": 100, "learner_steps": 5, "actor_episodes": 3}
    summary = RunSummary.from_run(experiment, counts, [(100, 9.0)], 1.234, eval_times_s=[1.0])
    assert (summary.status, summary.threshold, summary.time_to_threshold_s, summary.steps_to_threshold) == (
        "finished",
        None,
        None,
        None,
    )
    assert summary.wall_time_s == 1.23 and summary.final_eval_return == 9.0
    experiment.threshold = 100.0  # Never reached.
    summary = RunSummary.from_run(experiment, counts, [(50, 9.0), (100, 99.9)], 2.0, eval_times_s=[1.0, 2.0])
    assert (summary.threshold, summary.time_to_threshold_s, summary.steps_to_threshold) == (100.0, None, None)
    with pytest.raises(ValueError, match="status"):
        RunSummary.from_run(experiment, counts, [], 1.0, status="done")


def _settings(**overrides):
    """conf/config.yaml's top-level keys with `overrides`."""
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(OmegaConf.load(os.path.join(ROOT, "conf", "config.yaml")))
    config = {key: value for key, value in config.items() if key not in ("defaults", "hydra")}
    assert config["threshold"] is None
    config.update(overrides)
    return config


def test_threshold_is_validated_as_a_number_or_null():
    assert check_run_settings(_settings()).threshold is None
    assert check_run_settings(_settings(threshold=475)).threshold == 475.0
    assert isinstance(check_run_settings(_settings(threshold=475)).threshold, float)
    assert check_run_settings(_settings(threshold=-200.5)).threshold == -200.5
    for bad in ("high", True, [1], math.nan, math.inf):
        with pytest.raises(ConfigError) as error:
            check_run_settings(_settings(threshold=bad))
        assert error.value.key == "threshold"


def test_bad_threshold_on_the_command_line_exits_2_naming_the_key(run_dir):
    result = run_train(["threshold=high", f"hydra.run.dir={run_dir}"], timeout=300)
    assert result.returncode == 2
    assert "threshold" in result.stderr and "Traceback" not in result.stderr


def test_presets_name_their_thresholds():
    result = run_train(["experiment=dqn_cartpole", "--cfg", "job"], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\nthreshold: 475.0\n" in result.stdout
    result = run_train(["experiment=td3_pendulum", "--cfg", "job"], timeout=300)
    assert "\nthreshold: -200.0\n" in result.stdout


def _check_wall_time(run_dir, summary):
    """Every row of every node's CSV carries actor_steps and wall_time_s, within the run."""
    for label in LABELS:
        rows = _rows(os.path.join(run_dir, "logs", f"{label}.csv"))
        assert rows, label
        for row in rows:
            assert row["actor_steps"] != "" and row["wall_time_s"] != "", (label, row)
            assert 0.0 < float(row["wall_time_s"]) <= summary["wall_time_s"] + 0.01, (label, row)


def _check_wandb_wall_time(run_dir):
    history = read_wandb_offline_run(run_dir)["history"]
    for label in LABELS:
        rows = [row for row in history if any(key.startswith(f"{label}/") for key in row)]
        assert rows, label
        assert all(f"{label}/wall_time_s" in row and "actor_steps" in row for row in rows), label


@pytest.mark.reverb
def test_local_run_records_wall_time_and_time_to_threshold(run_dir):
    # A random CartPole policy scores about 10-30: a threshold of 9 is reached at the first evaluations.
    result = run_train([*TINY, "threshold=9", "logger=wandb", f"hydra.run.dir={run_dir}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["status"] == "finished" and summary["threshold"] == 9.0
    evaluations = _rows(os.path.join(run_dir, "logs", "evaluator.csv"))
    assert [int(row["actor_steps"]) for row in evaluations] == [0, 500, 1000, 1500]
    assert {row["evaluator_id"] for row in evaluations} == {"0"}
    index = next(k for k, row in enumerate(evaluations) if float(row["episode_return"]) >= 9.0)
    assert summary["steps_to_threshold"] == int(evaluations[index]["actor_steps"])
    wall_times = [float(row["wall_time_s"]) for row in evaluations]
    assert wall_times == sorted(wall_times)
    # Counted to when that round took its parameters: after the round before ended, before its own record.
    earliest = wall_times[index - 1] if index else 0.0
    assert earliest <= summary["time_to_threshold_s"] <= wall_times[index] + 0.01
    _check_wall_time(run_dir, summary)
    _check_wandb_wall_time(run_dir)


@pytest.mark.reverb
@pytest.mark.ray
@pytest.mark.slow  # About 100 s on 2 cores (Ray start-up dominates).
def test_ray_run_with_two_evaluators_logs_both_and_summarises_their_mean(run_dir):
    result = run_train(
        [
            *TINY,
            "launcher=ray",
            "launcher.num_actors=1",
            "launcher.num_evaluators=2",
            "threshold=9",
            "logger=wandb",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    evaluations = _rows(os.path.join(run_dir, "logs", "evaluator.csv"))
    by_evaluator = {
        evaluator: [row for row in evaluations if row["evaluator_id"] == evaluator] for evaluator in ("0", "1")
    }
    assert {row["evaluator_id"] for row in evaluations} == {"0", "1"}
    rounds = len(by_evaluator["0"])
    assert rounds == len(by_evaluator["1"]) == len(summary["eval_returns"]) >= 1
    for k, (steps, value) in enumerate(summary["eval_returns"]):
        pair = [by_evaluator[e][k] for e in ("0", "1")]
        assert value == pytest.approx(sum(float(row["episode_return"]) for row in pair) / 2)
        assert steps == max(int(row["actor_steps"]) for row in pair)
    assert summary["final_eval_return"] == pytest.approx(summary["eval_returns"][-1][1])
    assert summary["eval_returns"][-1][0] == 1500
    first = next(k for k, (_, value) in enumerate(summary["eval_returns"]) if value >= 9.0)
    assert summary["steps_to_threshold"] == summary["eval_returns"][first][0]
    latest = max(float(by_evaluator[e][first]["wall_time_s"]) for e in ("0", "1"))
    earliest = max(float(by_evaluator[e][first - 1]["wall_time_s"]) for e in ("0", "1")) if first else 0.0
    assert earliest <= summary["time_to_threshold_s"] <= latest + 0.01  # When the later of the two took its parameters.
    _check_wall_time(run_dir, summary)
    _check_wandb_wall_time(run_dir)


def test_curve_statistics_are_the_mean_of_the_last_three_rounds_and_the_curves_mean_height():
    from rl.experiments.summary import curve_statistics

    curve = [(1000, 10.0), (2000, 30.0), (3000, 20.0), (4000, 40.0)]
    # (20 + 25 + 30) * 1000 actor steps of trapezoids over the 3000 steps the curve spans.
    assert curve_statistics(curve) == (30.0, 25.0)
    assert curve_statistics([(500, 7.0)]) == (7.0, 7.0)
    assert all(math.isnan(value) for value in curve_statistics([]))
