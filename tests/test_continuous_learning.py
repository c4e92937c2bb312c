"""SAC, TD3 and D4PG each solve Pendulum-v1 (final evaluation return >= -250) with their
presets, through scripts/train.py with real reverb replay and fixed seeds.

The default suite runs seed 0 of each agent in the deterministic mode
(`launcher.deterministic=true`: the outcome is a fact of the code, not a draw) on a
third of the budget (10,000 actor steps, two evaluation rounds); `-m slow` runs seeds 1 and 2
in the default mode on the presets' full 30,000-step budget.
"""

import pytest

from conftest import read_summary, run_train

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

AGENTS = ["sac", "td3", "d4pg"]
SOLVED = -250.0


def _train_and_check(agent, seed, run_dir, extra=(), budget=30_000):
    result = run_train(
        [
            f"experiment={agent}_pendulum",
            f"seed={seed}",
            "progress=false",
            "logger=csv",
            *extra,
            f"hydra.run.dir={run_dir}",
        ],
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["agent"] == agent and summary["environment"] == "Pendulum-v1" and summary["seed"] == seed
    assert summary["actor_steps"] == budget
    assert summary["final_eval_return"] >= SOLVED, summary


@pytest.mark.parametrize("agent", AGENTS)
def test_solves_pendulum_seed_0(agent, run_dir):
    _train_and_check(
        agent, 0, run_dir, ["max_actor_steps=10000", "eval_every=5000", "launcher.deterministic=true"], budget=10_000
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("agent", AGENTS)
def test_solves_pendulum_other_seeds(agent, seed, run_dir):
    _train_and_check(agent, seed, run_dir)
