"""rliable's comparison of groups (rl.analysis.aggregates, scripts/plot.py --aggregate): scores
normalised per environment, IQM / mean / optimality gap with stratified-bootstrap intervals,
performance profiles, probabilities of improvement, grouping and the figures."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rl.analysis import compare, default_keys, find_runs, group_runs, normalised_scores, parse_score_range
from rl.analysis.aggregates import FIGURES, ScoreError, improvement_pairs, score_ranges
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
    low_rate = comparison.scores.matrices["1e-3"]
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
    (improvement,) = comparison.improvements
    assert (improvement["x"], improvement["y"]) == ("3e-4", "1e-3")
    assert [improvement["probability"], improvement["low"], improvement["high"]] == pytest.approx([1.0, 1.0, 1.0])
    half = int(np.argmin(np.abs(comparison.taus - 0.55)))
    assert comparison.profiles["1e-3"][half] == pytest.approx(3 / 8)  # 0.6, 0.7, 0.8 lie above 0.55.
    assert comparison.profiles["3e-4"][half] == 1.0
    again = compare(groups, ranges=RANGE, reps=300)
    assert all((again.intervals[k] == comparison.intervals[k]).all() for k in groups)  # Seeded.


def test_plot_aggregate_writes_the_figures_and_tables(two_groups, tmp_path):
    figures = tmp_path / "figures"
    result = _plot(two_groups, "--aggregate", figures, "--score-range", "0,10", "--reps", "200")
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

    # The built-in range for CartPole-v1, another score, and curves in the same call.
    result = _plot(
        two_groups, "--aggregate", figures, "--score", "last_evals_mean", "--reps", "50", "--out", tmp_path / "c.png"
    )
    assert result.returncode == 0, result.stderr
    assert "normalised last_evals_mean" in result.stdout and "CartPole-v1: 22.7 -> 0, 475 -> 1" in result.stdout
    assert "final evaluator/episode_return per group" in result.stdout
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_MAGIC


def test_groups_leave_the_environment_out_and_keep_two_sweeps_apart(tmp_path):
    finals = {"1e-3": [1.0, 2.0], "3e-4": [3.0, 4.0]}
    before = _sweep(tmp_path / "before", finals)
    after = _sweep(tmp_path / "after", {"1e-3": [5.0, 6.0], "3e-4": [7.0, 8.0]})
    runs = find_runs([str(before), str(after)])
    assert default_keys(runs) == ["dir", "agent.learning_rate"]  # The same grid twice: by sweep too.
    labels = list(group_runs(runs))
    assert labels == [f"dir={after}, learning_rate=1e-3", f"dir={after}, learning_rate=3e-4"] + [
        f"dir={before}, learning_rate=1e-3",
        f"dir={before}, learning_rate=3e-4",
    ]
    assert list(group_runs(runs, "dir")) == [str(after), str(before)]
    assert default_keys(find_runs([str(before)])) == ["agent.learning_rate"]
    # Runs given one by one are pooled by their settings, not split by directory.
    assert default_keys(find_runs([str(before / "0"), str(before / "2")])) == ["agent.learning_rate"]

    # Environments are tasks: one group per learning rate, each a matrix of runs x environments.
    cartpole = _sweep(tmp_path / "envs", finals, extra=["environment.name=CartPole-v1"])
    acrobot = _sweep(tmp_path / "envs2", finals, environment="Acrobot-v1", extra=["environment.name=Acrobot-v1"])
    for job in range(4):
        os.rename(acrobot / str(job), cartpole / str(job + 4))
    runs = find_runs([str(cartpole)])
    assert default_keys(runs) == ["agent.learning_rate", "environment.name"]
    assert default_keys(runs, exclude=("environment",)) == ["agent.learning_rate"]
    scores = normalised_scores(group_runs(runs, exclude=("environment",)), ranges=score_ranges())
    assert scores.tasks == ["Acrobot-v1", "CartPole-v1"] and scores.matrices["1e-3"].shape == (2, 2)
    assert scores.matrices["1e-3"][:, 1] == pytest.approx((np.array([1.0, 2.0]) - 22.7) / (475.0 - 22.7))
    with pytest.raises(ScoreError, match="groups ran on different environments"):
        normalised_scores(group_runs(runs, "environment.name"), ranges=score_ranges())


def test_scores_pairs_and_ranges():
    assert parse_score_range("CartPole-v1=22.7,475") == ("CartPole-v1", 22.7, 475.0)
    assert parse_score_range("-1200,-200") == (None, -1200.0, -200.0)
    for bad in ("1,2,3", "x", "CartPole-v1=5,1"):
        with pytest.raises(ValueError):
            parse_score_range(bad)
    assert score_ranges([(None, 0.0, 1.0)]) == {None: (0.0, 1.0)}  # One range for all replaces the table.
    assert score_ranges([("Pong", -21.0, 21.0)])["Pong"] == (-21.0, 21.0)
    assert improvement_pairs({"a": 0.1, "b": 0.3, "c": 0.2}) == [("b", "a"), ("c", "a"), ("b", "c")]
    many = {str(i): float(i) for i in range(6)}
    assert improvement_pairs(many) == [("5", str(i)) for i in range(5)]  # The best against each other.


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
    scores = normalised_scores(groups, ranges=score_ranges())
    assert scores.matrices["1e-3"].shape == (1, 2)
    assert any("its final_eval_return is nan" in note for note in scores.notes)
    assert any("1 on Acrobot-v1, 3 on CartPole-v1; the first 1 of each count" in note for note in scores.notes)


def test_bad_aggregate_requests_fail_in_one_line(two_groups, tmp_path):
    figures = tmp_path / "figures"
    cases = [
        (["--aggregate", figures, "--score-range", "CartPole-v1=9,1"], "HIGH must be a number above LOW"),
        (["--aggregate", figures, "--reps", "0"], "'0' is not a positive whole number"),
        (["--aggregate", figures, "--score", "best"], "invalid choice: 'best'"),
        ([], "give --out FIG.png (curves), --aggregate DIR (rliable's aggregates), or both"),
    ]
    for arguments, message in cases:
        result = _plot(two_groups, *arguments)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    other = _sweep(tmp_path / "walker", {"1e-3": [1.0, 2.0]}, environment="Walker2d-v5")
    result = _plot(other, "--aggregate", figures)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no score range for Walker2d-v5" in result.stderr and "--score-range Walker2d-v5=LOW,HIGH" in result.stderr
    assert not figures.exists()
