"""rliable's comparison of groups (rl.analysis.aggregates, scripts/plot.py --aggregate): scores
normalised per environment, IQM / mean / optimality gap with stratified-bootstrap intervals,
performance profiles, probabilities of improvement, grouping and the figures."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rl.analysis import find_runs, group_runs, varying_keys
from rl.analysis.aggregates import FIGURES, PAIR, ScoreError, compare, normalised_scores
from test_plot import PNG_MAGIC, _plot, _write_run

RANGE = {"CartPole-v1": (0.0, 10.0)}  # Returns 1..8 normalise to 0.1..0.8.


def _sweep(root, finals, key="agent.learning_rate", environment="CartPole-v1", extra=()):
    """A multirun whose jobs end at the given final returns: {value of `key`: [one per seed]}."""
    job = 0
    for value, returns in finals.items():
        for seed, final in enumerate(returns):
            overrides = ["experiment=dqn_cartpole", f"seed={seed}", f"{key}={value}", *extra]
            summary = {"environment": environment, "last_evals_mean": final / 2}
            _write_run(str(root / str(job)), overrides, [0.0, final / 2, final], summary=summary)
            job += 1
    return root


@pytest.fixture
def two_groups(tmp_path):
    """Eight seeds per learning rate: 1e-3 ends at 1..8, 3e-4 at 11..18 (every run better)."""
    return _sweep(tmp_path / "multirun", {"1e-3": np.arange(1.0, 9.0), "3e-4": np.arange(11.0, 19.0)})


def test_aggregates_are_rliables_on_known_scores(two_groups):
    from rliable import library, metrics

    groups = group_runs(find_runs([str(two_groups)]), exclude=("environment",))
    assert {label: len(runs) for label, runs in groups.items()} == {"3e-4": 8, "1e-3": 8}
    comparison = compare(groups, ranges=RANGE, reps=300)
    low_rate = comparison.scores["1e-3"]
    assert low_rate.shape == (8, 1) and low_rate[:, 0] == pytest.approx(np.arange(1, 9) / 10)
    # IQM of 0.1..0.8: the mean of the middle half, 0.3..0.6; optimality gap: 1 - mean(min(score, 1)).
    assert comparison.points["1e-3"] == pytest.approx([0.45, 0.45, 0.55])
    assert comparison.points["3e-4"] == pytest.approx([1.45, 1.45, 0.0])
    np.random.seed(0)
    _, expected = library.get_interval_estimates(
        {"1e-3": low_rate},
        lambda s: np.array([metrics.aggregate_iqm(s), metrics.aggregate_mean(s), metrics.aggregate_optimality_gap(s)]),
        reps=300,
    )
    assert comparison.intervals["1e-3"] == pytest.approx(expected["1e-3"])
    lows, highs = comparison.intervals["1e-3"]
    assert lows[0] < 0.45 < highs[0] and lows[2] < 0.55 < highs[2]
    assert comparison.intervals["3e-4"][:, 2] == pytest.approx([0.0, 0.0])  # Every run solves.
    # Every 3e-4 run beats every 1e-3 run, whichever runs a resample draws.
    assert comparison.improvement == {f"3e-4{PAIR}1e-3": 1.0}
    assert comparison.improvement_cis[f"3e-4{PAIR}1e-3"] == pytest.approx([1.0, 1.0])
    half = int(np.argmin(np.abs(comparison.taus - 0.55)))
    assert comparison.profiles["1e-3"][half] == pytest.approx(3 / 8)  # 0.6, 0.7, 0.8 lie above 0.55.
    assert comparison.profiles["3e-4"][half] == 1.0
    again = compare(groups, ranges=RANGE, reps=300)
    assert all((again.intervals[k] == comparison.intervals[k]).all() for k in groups)  # Seeded.


def test_plot_aggregate_writes_the_figures_and_tables(two_groups, tmp_path):
    figures = tmp_path / "figures"
    result = _plot(two_groups, "--aggregate", figures, "--score-range", "CartPole-v1=0,10", "--reps", "200")
    assert result.returncode == 0, result.stderr
    for name in FIGURES:
        assert (figures / name).read_bytes()[:8] == PNG_MAGIC and (figures / name).stat().st_size > 5000
    lines = result.stdout.splitlines()
    assert lines[0].startswith("normalised final_eval_return (0: random policy, 1: solved) per group")
    assert "CartPole-v1: 0 -> 0, 10 -> 1" in lines[0] and "200 resamples" in lines[0]
    assert lines[1].split()[:4] == ["agent.learning_rate", "runs", "IQM", "95%"]
    rows = {line.split()[0]: line.split() for line in lines[3:5]}
    assert rows["1e-3"][1:3] == ["8", "0.450"] and rows["3e-4"][1:3] == ["8", "1.450"]
    improvement = lines[lines.index("probability of improvement: P(X > Y), a run of X outscoring a run of Y") + 3]
    assert improvement.split() == ["3e-4", "1e-3", "1.000", "[1.000,", "1.000]"]
    assert "16 runs in 2 groups" in lines[-1]

    # The built-in range for CartPole-v1, another score, and curves in the same call, the figures beside them.
    beside = tmp_path / "beside"
    result = _plot(two_groups, "--score", "last_evals_mean", "--reps", "50", "--out", beside / "c.png", "--aggregate")
    assert result.returncode == 0, result.stderr
    assert "normalised last_evals_mean" in result.stdout and "CartPole-v1: 22.7 -> 0, 475 -> 1" in result.stdout
    assert "final evaluator/episode_return per group" in result.stdout
    assert sorted(path.name for path in beside.iterdir()) == sorted(["c.png", *FIGURES])
    assert (beside / "c.png").read_bytes()[:8] == PNG_MAGIC
    result = _plot(two_groups, "--aggregate")
    assert result.returncode == 2 and "--aggregate without a DIR writes beside --out's figure" in result.stderr


def test_environments_are_tasks_and_dir_keeps_two_sweeps_apart(tmp_path):
    finals = {"1e-3": [1.0, 2.0], "3e-4": [3.0, 4.0]}
    before = _sweep(tmp_path / "before", finals)
    after = _sweep(tmp_path / "after", {"1e-3": [5.0, 6.0], "3e-4": [7.0, 8.0]})
    runs = find_runs([str(before), str(after)])
    assert list(group_runs(runs)) == ["3e-4", "1e-3"]  # The same grid twice: pooled by its settings ...
    assert list(group_runs(runs, "dir")) == [str(after), str(before)]  # ... or kept apart by --hue dir.
    labels = list(group_runs(runs, "dir,agent.learning_rate"))
    assert labels[0] == f"dir={after}, learning_rate=1e-3" and len(labels) == 4

    # Environments are tasks: one group per learning rate, each a matrix of runs x environments.
    cartpole = _sweep(tmp_path / "envs", finals, extra=["environment.name=CartPole-v1"])
    acrobot = _sweep(tmp_path / "envs2", finals, environment="Acrobot-v1", extra=["environment.name=Acrobot-v1"])
    for job in range(4):
        os.rename(acrobot / str(job), cartpole / str(job + 4))
    runs = find_runs([str(cartpole)])
    assert varying_keys(runs) == ["agent.learning_rate", "environment.name"]
    assert varying_keys(runs, exclude=("environment",)) == ["agent.learning_rate"]
    matrices, tasks, _ = normalised_scores(group_runs(runs, exclude=("environment",)))
    assert tasks == ["Acrobot-v1", "CartPole-v1"] and matrices["1e-3"].shape == (2, 2)
    assert matrices["1e-3"][:, 1] == pytest.approx((np.array([1.0, 2.0]) - 22.7) / (475.0 - 22.7))
    with pytest.raises(ScoreError, match="groups ran on different environments"):
        normalised_scores(group_runs(runs, "environment.name"))


def test_pairs_compared(tmp_path):
    """Up to 4 groups every pair, the one with the higher IQM first; more: the best against each other."""
    root = _sweep(tmp_path / "three", {"a": [1.0, 2.0], "b": [5.0, 6.0], "c": [3.0, 4.0]}, key="agent.name")
    comparison = compare(group_runs(find_runs([str(root)])), ranges=RANGE, reps=20)
    assert [pair.split(PAIR) for pair in comparison.improvement] == [["b", "c"], ["b", "a"], ["c", "a"]]
    root = _sweep(tmp_path / "six", {str(level): [level, level + 0.5] for level in range(6)}, key="agent.name")
    comparison = compare(group_runs(find_runs([str(root)])), ranges=RANGE, reps=20)
    assert [pair.split(PAIR) for pair in comparison.improvement] == [["5", str(i)] for i in range(4, -1, -1)]


def test_the_score_is_chosen_per_run(tmp_path):
    _write_run(str(tmp_path / "run"), ["seed=0"], [1.0, 2.0, 6.0], summary={"last_evals_mean": 3.0})
    (run,) = find_runs([str(tmp_path / "run")])
    assert run.score() == 6.0 and run.score("last_evals_mean") == 3.0
    run.config["objective"] = "last_evals_mean"
    assert run.score("objective") == 3.0
    with pytest.raises(KeyError, match="has no eval_return_auc"):
        run.score("eval_return_auc")
    os.remove(tmp_path / "run" / "summary.json")
    (run,) = find_runs([str(tmp_path / "run")])
    assert run.score() == 6.0  # No summary: the last evaluation in logs/evaluator.csv.


def test_uneven_and_unscorable_runs_are_noted(tmp_path):
    root = _sweep(tmp_path / "multirun", {"1e-3": [1.0, 2.0, 3.0]}, extra=["environment.name=CartPole-v1"])
    _sweep(tmp_path / "more", {"1e-3": [4.0]}, environment="Acrobot-v1", extra=["environment.name=Acrobot-v1"])
    os.rename(tmp_path / "more" / "0", root / "3")
    _write_run(str(root / "4"), ["experiment=dqn_cartpole", "seed=9", "agent.learning_rate=1e-3"], [1.0, float("nan")])
    groups = group_runs(find_runs([str(root)]), "agent.learning_rate")
    matrices, _, notes = normalised_scores(groups)
    assert matrices["1e-3"].shape == (1, 2)
    assert any("its final_eval_return is nan" in note for note in notes)
    assert any("1 on Acrobot-v1, 3 on CartPole-v1; the first 1 of each count" in note for note in notes)


def test_bad_aggregate_requests_fail_in_one_line(two_groups, tmp_path):
    figures = tmp_path / "figures"
    cases = [
        (["--aggregate", figures, "--score-range", "CartPole-v1=9,1"], "invalid score_range value: 'CartPole-v1=9,1'"),
        (["--aggregate", figures, "--score-range", "CartPole-v1=x"], "invalid score_range value"),
        (["--aggregate", figures, "--reps", "0"], "--reps must be at least 1"),
        (["--aggregate", figures, "--score", "best"], "invalid choice: 'best'"),
        ([], "give --out FIG.png (curves), --aggregate DIR (rliable's aggregates), or both"),
    ]
    for arguments, message in cases:
        result = _plot(two_groups, *arguments)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    other = _sweep(tmp_path / "walker", {"1e-3": [1.0, 2.0]}, environment="HumanoidStandup-v5")
    result = _plot(other, "--aggregate", figures)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "no score range for HumanoidStandup-v5" in result.stderr
        and "--score-range HumanoidStandup-v5=LOW,HIGH" in result.stderr
    )
    assert not figures.exists()


def test_every_atari_game_and_mujoco_task_has_a_score_range():
    """Atari's 57 games by the names environment.name takes (each one ALE knows), with random below human; every
    Gymnasium MuJoCo v5 task but HumanoidStandup (no published or solved return), with random below solved."""
    import gymnasium

    from rl.analysis.score_ranges import ATARI, MUJOCO, SCORE_RANGES
    from rl.environments.atari import validate_game
    from rl.environments.factories import register_installed_families

    assert len(ATARI) == 57
    for game, (random, human) in ATARI.items():
        assert validate_game(game) == game and random < human, game
    register_installed_families()
    tasks = {name for name in gymnasium.envs.registry if name.endswith("-v5") and not name.startswith("ALE/")}
    assert set(MUJOCO) == tasks - {"HumanoidStandup-v5"}
    assert all(low < high for low, high in MUJOCO.values())
    assert SCORE_RANGES["Pong"] == (-20.7, 14.6) and SCORE_RANGES["CartPole-v1"] == (22.7, 475.0)
