"""End-to-end runs of scripts/train.py: outputs, wandb offline tracking, learning."""

import csv
import os

import pytest

from conftest import read_summary, read_wandb_offline_run, run_train

SUMMARY_KEYS = {
    "agent",
    "environment",
    "seed",
    "actor_steps",
    "learner_steps",
    "episodes",
    "wall_time_s",
    "final_eval_return",
    "best_eval_return",
}


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


@pytest.mark.reverb
def test_short_run_writes_logs_checkpoint_and_summary(run_dir):
    result = run_train(
        [
            "max_actor_steps=2500",
            "eval_every=1000",
            "eval_episodes=2",
            "agent.min_replay_size=500",
            "agent.batch_size=64",
            "agent.samples_per_insert=32",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["agent"] == "dqn" and summary["environment"] == "CartPole-v1"
    assert summary["actor_steps"] == 2500
    # One learner step per batch_size / samples_per_insert = 2 inserts once min_replay_size is reached.
    assert 990 <= summary["learner_steps"] <= 1005
    evaluations = _rows(os.path.join(run_dir, "logs", "evaluator.csv"))
    assert [int(row["actor_steps"]) for row in evaluations] == [0, 1000, 2000, 2500]
    assert float(evaluations[-1]["episode_return"]) == pytest.approx(summary["final_eval_return"])
    assert summary["best_eval_return"] == max(float(row["episode_return"]) for row in evaluations)
    actor_rows = _rows(os.path.join(run_dir, "logs", "actor.csv"))
    assert len(actor_rows) == summary["episodes"] and {row["actor_id"] for row in actor_rows} == {"0"}
    assert _rows(os.path.join(run_dir, "logs", "learner.csv"))
    assert os.listdir(os.path.join(run_dir, "checkpoints"))
    assert os.path.exists(os.path.join(run_dir, ".hydra", "config.yaml"))


@pytest.mark.reverb
def test_wandb_offline_run_holds_resolved_config_and_eval_history(run_dir):
    result = run_train(
        [
            "logger=wandb",
            "max_actor_steps=1500",
            "eval_every=500",
            "eval_episodes=2",
            "agent.min_replay_size=200",
            "agent.learning_rate=0.0005",
            "seed=4",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = read_wandb_offline_run(run_dir)
    assert run["config"]["agent"]["learning_rate"] == 0.0005
    assert run["config"]["environment"]["name"] == "CartPole-v1"
    assert run["config"]["seed"] == 4 and run["config"]["max_actor_steps"] == 1500
    assert run["name"].startswith("CartPole-v1__dqn__4__")
    evaluations = [row for row in run["history"] if "evaluator/episode_return" in row]
    assert [row["actor_steps"] for row in evaluations] == [0, 500, 1000, 1500]
    summary = read_summary(run_dir)
    assert evaluations[-1]["evaluator/episode_return"] == pytest.approx(summary["final_eval_return"])
    assert any("learner/learner_steps" in row for row in run["history"])
    assert run["exit_code"] == 0


def _learns_cartpole(seed, run_dir, *overrides):
    """The preset's full budget, exactly, and a final evaluation of at least 475."""
    result = run_train(
        ["experiment=dqn_cartpole", f"seed={seed}", "progress=false", f"hydra.run.dir={run_dir}", *overrides],
        timeout=1500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["actor_steps"] == 50_000  # The preset's budget, exactly.
    assert summary["final_eval_return"] >= 475, summary


@pytest.mark.reverb
def test_dqn_solves_cartpole_seed_1(run_dir):
    """In the deterministic mode (its result is a fact of the code, not a draw: reverb's
    samplers take no seed); the other seeds, in the default mode, run under -m slow. Seed 1's
    policy scores 500 in each of its last five rounds; seed 0's (the same learner state since
    the round at step 0 came, bit for bit) scores 448-500 from round to round, an episode in
    ten falling early, so its final round is a draw of the evaluation's episodes."""
    _learns_cartpole(1, run_dir, "launcher.deterministic=true")


@pytest.mark.reverb
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
def test_dqn_solves_cartpole_other_seeds(seed, run_dir):
    _learns_cartpole(seed, run_dir)
