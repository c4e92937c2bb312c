"""Comparing groups of runs as rliable recommends: each run's score normalised per environment
(0: a random policy, 1: solved), then per group the IQM, mean and optimality gap with 95%
stratified-bootstrap intervals, performance profiles and probabilities of improvement between
groups; their figures and a plain-text table."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

from rl.analysis.runs import Run
from rl.analysis.statistics import (
    AGGREGATE_METRICS,
    CONFIDENCE,
    DEFAULT_REPS,
    aggregate_metrics,
    performance_profiles,
    probabilities_of_improvement,
)

# Per environment (summary.json's `environment`): the return that normalises to 0, a uniformly
# random policy's mean (measured here with gymnasium: 200 CartPole, 100 Pendulum, 50 Acrobot,
# 30 HalfCheetah, 20 MountainCar episodes; Pong's from Mnih et al., 2015), and the one that
# normalises to 1, the return that counts as solving (Gymnasium's reward_threshold, or the
# presets' `threshold` where Gymnasium has none). Other environments: --score-range.
SCORE_RANGES: dict[str, tuple[float, float]] = {
    "CartPole-v1": (22.7, 475.0),
    "cartpole_masked": (22.7, 475.0),
    "Acrobot-v1": (-494.2, -100.0),
    "MountainCar-v0": (-200.0, -110.0),
    "Pendulum-v1": (-1207.6, -200.0),
    "HalfCheetah-v5": (-262.8, 4800.0),
    "Pong": (-20.7, 18.0),
}
ALL_TASKS = None  # A --score-range without `ENV=`: for every environment.
# Up to this many groups every pair is compared; more: the best group (by IQM) against each other.
MAX_PAIRED_GROUPS = 4
PROFILE_POINTS = 101
FIGURES = ("aggregates.png", "profiles.png", "improvement.png")


class ScoreError(ValueError):
    """Runs that cannot be compared as asked; the message is one line for the user."""


def parse_score_range(text: str) -> tuple[str | None, float, float]:
    """`[ENV=]LOW,HIGH` -> (ENV or None for every environment, LOW, HIGH); ValueError otherwise."""
    task, separator, numbers = text.rpartition("=")
    parts = numbers.split(",")
    try:
        low, high = (float(part) for part in parts)
    except ValueError:
        raise ValueError(f"{text!r} is not [ENV=]LOW,HIGH (e.g. CartPole-v1=22.7,475)") from None
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        raise ValueError(f"{text!r}: HIGH must be a number above LOW")
    return (task.strip() or ALL_TASKS) if separator else ALL_TASKS, low, high


def score_ranges(given: Sequence[tuple[str | None, float, float]] = ()) -> dict[str | None, tuple[float, float]]:
    """SCORE_RANGES overridden by the command line's ranges."""
    ranges: dict[str | None, tuple[float, float]] = dict(SCORE_RANGES)
    if any(task is ALL_TASKS for task, _, _ in given):
        ranges = {}  # One range for every environment replaces the table.
    ranges.update({task: (low, high) for task, low, high in given})
    return ranges


@dataclasses.dataclass
class Scores:
    """Each group's normalised scores as a (runs, tasks) matrix, tasks in `tasks` order."""

    matrices: dict[str, np.ndarray]
    tasks: list[str]
    ranges: dict[str, tuple[float, float]]
    notes: list[str]


def normalised_scores(
    groups: Mapping[str, Sequence[Run]],
    score: str = "final_eval_return",
    ranges: Mapping[str | None, tuple[float, float]] | None = None,
) -> Scores:
    """Every run's `score` normalised by its environment's range, per group a matrix of runs by
    environments. A group with more runs on one environment than another keeps the first of each
    (noted); groups on different environments, or an environment with no range, raise ScoreError."""
    ranges = score_ranges() if ranges is None else ranges
    notes: list[str] = []
    per_group: dict[str, dict[str, list[float]]] = {}
    for label, runs in groups.items():
        for run in runs:
            try:
                value = run.score(score)
            except KeyError as error:
                notes.append(f"skipping {run.path}: {error.args[0]}")
                continue
            if not math.isfinite(value):
                notes.append(f"skipping {run.path}: its {score} is {value}")
                continue
            per_group.setdefault(label, {}).setdefault(run.task, []).append(value)
    if not per_group:
        raise ScoreError(f"no run has a finite {score}")
    task_sets = {label: sorted(tasks) for label, tasks in per_group.items()}
    tasks = next(iter(task_sets.values()))
    if any(other != tasks for other in task_sets.values()):
        listed = "; ".join(f"{label}: {', '.join(found)}" for label, found in task_sets.items())
        raise ScoreError(
            f"groups ran on different environments ({listed}); compare groups on the same environments "
            "(--hue to group otherwise)"
        )
    missing = [task for task in tasks if task not in ranges and ALL_TASKS not in ranges]
    if missing:
        raise ScoreError(
            f"no score range for {', '.join(missing)}: give the return of a random policy and of a solved task, "
            f"e.g. --score-range {missing[0]}=LOW,HIGH (known: {', '.join(SCORE_RANGES)})"
        )
    used = {task: ranges.get(task) or ranges[ALL_TASKS] for task in tasks}
    matrices = {}
    for label, by_task in per_group.items():
        counts = [len(by_task[task]) for task in tasks]
        runs = min(counts)
        if len(set(counts)) > 1:
            found = ", ".join(f"{count} on {task}" for task, count in zip(tasks, counts))
            notes.append(f"{label}: {found}; the first {runs} of each count")
        columns = [
            (np.asarray(by_task[task][:runs]) - used[task][0]) / (used[task][1] - used[task][0]) for task in tasks
        ]
        matrices[label] = np.stack(columns, axis=1)
    return Scores(matrices, tasks, used, notes)


def improvement_pairs(iqms: Mapping[str, float]) -> list[tuple[str, str]]:
    """The (X, Y) pairs compared, X the one with the higher IQM: every pair up to MAX_PAIRED_GROUPS
    groups, else the best group against each other."""
    labels = list(iqms)
    if len(labels) > MAX_PAIRED_GROUPS:
        best = max(labels, key=lambda label: iqms[label])
        return [(best, label) for label in labels if label != best]
    pairs = []
    for index, first in enumerate(labels):
        for second in labels[index + 1 :]:
            pairs.append((first, second) if iqms[first] >= iqms[second] else (second, first))
    return pairs


@dataclasses.dataclass
class Comparison:
    scores: Scores
    score: str
    reps: int
    points: dict[str, np.ndarray]  # Group -> (IQM, mean, optimality gap).
    intervals: dict[str, np.ndarray]  # Group -> (2, metrics): lows, highs.
    taus: np.ndarray
    profiles: dict[str, np.ndarray]
    profile_bands: dict[str, np.ndarray]
    improvements: list[dict[str, Any]]


def compare(
    groups: Mapping[str, Sequence[Run]],
    score: str = "final_eval_return",
    ranges: Mapping[str | None, tuple[float, float]] | None = None,
    reps: int = DEFAULT_REPS,
) -> Comparison:
    """Everything rliable says about these groups (see the module's docstring)."""
    scores = normalised_scores(groups, score, ranges)
    points, intervals = aggregate_metrics(scores.matrices, reps)
    everything = np.concatenate([matrix.ravel() for matrix in scores.matrices.values()])
    taus = np.linspace(min(0.0, float(everything.min())), max(1.0, float(everything.max())), PROFILE_POINTS)
    profiles, bands = performance_profiles(scores.matrices, taus, reps)
    iqms = {label: float(point[0]) for label, point in points.items()}
    improvements = probabilities_of_improvement(scores.matrices, improvement_pairs(iqms), reps)
    return Comparison(scores, score, reps, points, intervals, taus, profiles, bands, improvements)


def _normalised_label(comparison: Comparison) -> str:
    return f"normalised {comparison.score} (0: random policy, 1: solved)"


def plot_aggregates(comparison: Comparison) -> Any:
    """rliable's interval plot: per metric, each group's point estimate and 95% interval."""
    from rliable import plot_utils

    groups = list(comparison.points)
    figure, _ = plot_utils.plot_interval_estimates(
        comparison.points,
        comparison.intervals,
        metric_names=list(AGGREGATE_METRICS),
        algorithms=groups,
        row_height=max(0.45, 1.8 / len(groups)),
        xlabel=_normalised_label(comparison),
        xlabel_y_coordinate=-0.45 / max(0.45 * len(groups), 1.8),
    )
    return figure


def plot_profiles(comparison: Comparison) -> Any:
    """rliable's performance profiles: the fraction of runs above each normalised score, 95% bands."""
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    figure, ax = plt.subplots(figsize=(7.0, 4.5))
    plot_utils.plot_performance_profiles(
        comparison.profiles,
        comparison.taus,
        performance_profile_cis=comparison.profile_bands,
        ax=ax,
        xlabel=_normalised_label(comparison) + r" $\tau$",
        ylabel=r"fraction of runs with score $> \tau$",
        labelsize="large",
        ticklabelsize="large",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize="medium")
    return figure


def plot_improvement(comparison: Comparison) -> Any:
    """rliable's probability-of-improvement plot: P(X > Y) and its 95% interval per pair."""
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    rows = comparison.improvements
    figure, ax = plt.subplots(figsize=(4.5, max(1.5, 0.6 * len(rows) + 0.8)))
    if not rows:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "one group: nothing to compare", ha="center", va="center")
        return figure
    plot_utils.plot_probability_of_improvement(
        {f"{row['x']}\x1f{row['y']}": row["probability"] for row in rows},
        {f"{row['x']}\x1f{row['y']}": np.array([row["low"], row["high"]]) for row in rows},
        pair_separator="\x1f",
        ax=ax,
        xticks=[0.0, 0.25, 0.5, 0.75, 1.0],
        xlabel="P(X > Y)",
        left_ylabel="X",
        right_ylabel="Y",
    )
    ax.set_xlim(0.0, 1.0)
    return figure


def save_figures(comparison: Comparison, directory: str) -> list[str]:
    """Writes FIGURES (aggregates, performance profiles, probabilities of improvement) to `directory`."""
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, plot in zip(FIGURES, (plot_aggregates, plot_profiles, plot_improvement)):
        figure = plot(comparison)
        path = os.path.join(directory, name)
        figure.savefig(path, dpi=150, bbox_inches="tight")  # Never cut a group's label.
        plt.close(figure)
        paths.append(path)
    return paths


def _interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def _columns(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(map(len, column)) for column in zip(header, *body)]
    lines = []
    for index, line in enumerate([header, *body]):
        lines.append("  ".join([line[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(line[1:], widths[1:]))]))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def format_comparison(comparison: Comparison, hue: str | None = None) -> str:
    """The aggregates and the probabilities of improvement as plain-text tables."""
    scores = comparison.scores
    ranges = ", ".join(f"{task}: {low:g} -> 0, {high:g} -> 1" for task, (low, high) in scores.ranges.items())
    lines = [
        f"{_normalised_label(comparison)} per group ({ranges}); "
        f"{CONFIDENCE:.0%} stratified-bootstrap CIs, {comparison.reps} resamples"
    ]
    header = [hue or "group", "runs"]
    for metric in AGGREGATE_METRICS:
        header += [metric, "95% CI"]
    body = []
    for label, point in comparison.points.items():
        row = [label, str(scores.matrices[label].size)]
        for index in range(len(AGGREGATE_METRICS)):
            row += [f"{point[index]:.3f}", _interval(*comparison.intervals[label][:, index])]
        body.append(row)
    lines += _columns(header, body)
    if comparison.improvements:
        lines += ["", "probability of improvement: P(X > Y), a run of X outscoring a run of Y"]
        lines += _columns(
            ["X", "Y", "P(X > Y)", "95% CI"],
            [
                [row["x"], row["y"], f"{row['probability']:.3f}", _interval(row["low"], row["high"])]
                for row in comparison.improvements
            ],
        )
    return "\n".join(lines)
