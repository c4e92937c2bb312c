"""rliable's statistics (Agarwal et al., 2021), seeded: intervals of final values and curves, and the
comparison of groups of runs on scores normalised per environment (IQM, mean, optimality gap, performance
profiles, probability of improvement), with its figures and tables."""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import warnings
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
from rliable import library, metrics

from rl.analysis.score_ranges import SCORE_RANGES

DEFAULT_REPS = 1000  # Bootstrap resamples: few, for speed; rliable's papers use 50,000.
SEED = 0  # The bootstrap's seed: the same runs always give the same intervals.
METRICS = {"IQM": metrics.aggregate_iqm, "mean": metrics.aggregate_mean}
METRICS["optimality gap"] = metrics.aggregate_optimality_gap
MAX_PAIRED_GROUPS = 4  # Up to this many groups every pair is compared; more: the best against each other.
PROFILE_POINTS = 101
FIGURES = ("aggregates.png", "profiles.png", "improvement.png")
PAIR = "\x1f"  # Joins a pair of group labels (which may hold commas) into rliable's key.


class ScoreError(ValueError):
    """Runs that cannot be compared as asked; the message is one line for the user."""


def _per_group(estimate: Callable[..., tuple[dict, dict]], scores: Mapping[str, Any], *args: Any, **kwargs: Any):
    """rliable's `estimate` called one group at a time, numpy's global generator (which its bootstrap draws
    from) seeded alike for each, so a group's interval does not depend on the others; the caller's state kept."""
    state = np.random.get_state()
    points = {}
    intervals = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # Identical runs: a zero-width interval.
        for key, value in scores.items():
            np.random.seed(SEED)
            point, interval = estimate({key: value}, *args, **kwargs)
            points[key] = point[key]
            intervals[key] = interval[key].reshape(2, *np.shape(point[key]))
    np.random.set_state(state)
    return points, intervals


def estimates(scores: Mapping[str, Any], function: Callable, reps: int = DEFAULT_REPS) -> tuple[dict, dict]:
    """rliable's point estimates of `function` per group and their 95% stratified-bootstrap intervals (2, ...)."""
    return _per_group(library.get_interval_estimates, scores, function, reps=reps)


def summarize(values: Sequence[float], reps: int = DEFAULT_REPS) -> dict[str, float]:
    """Mean, IQM and their 95% bootstrap intervals of one value per run (non-finite ones dropped)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)][:, None]
    if values.size == 0:
        return {"runs": 0, **dict.fromkeys(("mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high"), np.nan)}
    points, intervals = estimates({"runs": values}, lambda s: np.array([s.mean(), metrics.aggregate_iqm(s)]), reps)
    stats = {"runs": len(values)}
    for name, point, low, high in zip(("mean", "iqm"), points["runs"], *intervals["runs"]):
        stats.update({name: float(point), f"{name}_low": float(low), f"{name}_high": float(high)})
    return stats


def text_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    """Plain-text table lines: the first column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(map(len, column)) for column in zip(header, *body)]
    lines = ["  ".join([row[0].ljust(widths[0]), *map(str.rjust, row[1:], widths[1:])]) for row in (header, *body)]
    return [lines[0], "  ".join("-" * width for width in widths), *lines[1:]]


class ScoredRun(Protocol):
    """What a comparison reads of a run (rl.analysis.Run is one): where it lives, its task, its scores."""

    path: str

    @property
    def task(self) -> str: ...

    def score(self, name: str) -> float: ...


def normalised_scores(
    groups: Mapping[str, Sequence[ScoredRun]],
    score: str = "final_eval_return",
    ranges: Mapping[str, tuple] = SCORE_RANGES,
) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Per group, its runs' `score` normalised per environment as a (runs, environments) matrix; the environments
    and notes. A group with more runs on one environment keeps the first of each; ScoreError when incomparable."""
    notes: list[str] = []
    per_group: dict[str, dict[str, list[float]]] = {}
    for label, runs in groups.items():
        for run in runs:
            try:
                value = run.score(score)
            except KeyError as error:
                notes.append(f"skipping {run.path}: {error.args[0]}")
                continue
            if math.isfinite(value):
                per_group.setdefault(label, {}).setdefault(run.task, []).append(value)
            else:
                notes.append(f"skipping {run.path}: its {score} is {value}")
    if not per_group:
        raise ScoreError(f"no run has a finite {score}")
    tasks = sorted(next(iter(per_group.values())))
    if any(sorted(by_task) != tasks for by_task in per_group.values()):
        listed = "; ".join(f"{label}: {', '.join(sorted(by_task))}" for label, by_task in per_group.items())
        raise ScoreError(f"groups ran on different environments ({listed}); compare groups on the same ones (--hue)")
    missing = [task for task in tasks if task not in ranges]
    if missing:
        raise ScoreError(
            f"no score range for {', '.join(missing)}: give a random policy's return and a solved one, "
            f"e.g. --score-range {missing[0]}=LOW,HIGH (known: {', '.join(ranges)})"
        )
    matrices = {}
    lows, highs = np.array([ranges[task] for task in tasks]).T
    for label, by_task in per_group.items():
        counts = [len(by_task[task]) for task in tasks]
        if len(set(counts)) > 1:
            found = ", ".join(f"{count} on {task}" for task, count in zip(tasks, counts))
            notes.append(f"{label}: {found}; the first {min(counts)} of each count")
        matrices[label] = (np.array([by_task[task][: min(counts)] for task in tasks]).T - lows) / (highs - lows)
    return matrices, tasks, notes


@dataclasses.dataclass
class Comparison:
    score: str
    reps: int
    ranges: dict[str, tuple[float, float]]  # Environment -> the returns normalised to 0 and 1.
    notes: list[str]  # Runs skipped or cut, one line each.
    scores: dict[str, np.ndarray]  # Group -> (runs, environments) normalised scores.
    points: dict[str, np.ndarray]  # Group -> its METRICS.
    intervals: dict[str, np.ndarray]  # Group -> (2, METRICS): lows, highs.
    taus: np.ndarray
    profiles: dict[str, np.ndarray]
    profile_cis: dict[str, np.ndarray]
    improvement: dict[str, float]  # "X<PAIR>Y" -> P(X > Y), X the group with the higher IQM.
    improvement_cis: dict[str, np.ndarray]


def compare(
    groups: Mapping[str, Sequence[ScoredRun]],
    score: str = "final_eval_return",
    ranges: Mapping[str, tuple[float, float]] = SCORE_RANGES,
    reps: int = DEFAULT_REPS,
) -> Comparison:
    """Everything rliable says about these groups (see the module's docstring)."""
    scores, tasks, notes = normalised_scores(groups, score, ranges)
    functions = list(METRICS.values())
    points, intervals = estimates(scores, lambda scores: np.array([f(scores) for f in functions]), reps)
    everything = np.concatenate([matrix.ravel() for matrix in scores.values()])
    taus = np.linspace(min(0.0, everything.min()), max(1.0, everything.max()), PROFILE_POINTS)
    profiles, profile_cis = _per_group(library.create_performance_profile, scores, taus, reps=reps)
    ranked = sorted(points, key=lambda label: -points[label][0])
    pairs = [(ranked[0], label) for label in ranked[1:]]  # More than MAX_PAIRED_GROUPS: the best against each other.
    pairs = list(itertools.combinations(ranked, 2)) if len(ranked) <= MAX_PAIRED_GROUPS else pairs
    paired = {f"{x}{PAIR}{y}": [scores[x], scores[y]] for x, y in pairs}
    improvement, improvement_cis = estimates(paired, metrics.probability_of_improvement, reps)
    ranges = {task: ranges[task] for task in tasks}
    return Comparison(
        score, reps, ranges, notes, scores, points, intervals, taus, profiles, profile_cis, improvement, improvement_cis
    )


def save_figures(comparison: Comparison, directory: str) -> list[str]:
    """Writes FIGURES to `directory` with rliable's plots: the aggregates, performance profiles and P(X > Y)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from rliable import plot_utils

    label = f"normalised {comparison.score} (0: random policy, 1: solved)"
    groups = len(comparison.points)
    aggregates, _ = plot_utils.plot_interval_estimates(
        comparison.points,
        comparison.intervals,
        metric_names=list(METRICS),
        row_height=max(0.45, 1.8 / groups),
        xlabel=label,
        xlabel_y_coordinate=-0.45 / max(0.45 * groups, 1.8),
    )
    for axis in aggregates.axes:  # Four narrow panels: at most four ticks each, so their labels never overlap.
        axis.xaxis.set_major_locator(MaxNLocator(nbins=3))
    profiles, ax = plt.subplots(figsize=(7.0, 4.5))
    plot_utils.plot_performance_profiles(
        comparison.profiles,
        comparison.taus,
        performance_profile_cis=comparison.profile_cis,
        ax=ax,
        xlabel=label + r" $\tau$",
        ylabel=r"fraction of runs with score $> \tau$",
        labelsize="large",
        ticklabelsize="large",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    improvement, ax = plt.subplots(figsize=(4.5, max(1.5, 0.6 * len(comparison.improvement) + 0.8)))
    if comparison.improvement:
        plot_utils.plot_probability_of_improvement(
            comparison.improvement, comparison.improvement_cis, PAIR, ax, xticks=[0.0, 0.25, 0.5, 0.75, 1.0]
        )
    else:
        ax.text(0.5, 0.5, "one group: nothing to compare", ha="center", va="center")
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, name) for name in FIGURES]
    for figure, path in zip((aggregates, profiles, improvement), paths):
        figure.savefig(path, dpi=150, bbox_inches="tight")  # Never cut a group's label.
        plt.close(figure)
    return paths


def format_comparison(comparison: Comparison, hue: str | None = None) -> str:
    """The aggregates and the probabilities of improvement as plain-text tables."""
    ranges = ", ".join(f"{task}: {low:g} -> 0, {high:g} -> 1" for task, (low, high) in comparison.ranges.items())
    lines = [
        f"normalised {comparison.score} (0: random policy, 1: solved) per group ({ranges}); "
        f"95% stratified-bootstrap CIs, {comparison.reps} resamples"
    ]
    cells = lambda value, low, high: [f"{value:.3f}", f"[{low:.3f}, {high:.3f}]"]
    header = [hue or "group", "runs", *(name for metric in METRICS for name in (metric, "95% CI"))]
    body = []
    for label, point in comparison.points.items():
        intervals = itertools.chain(*map(cells, point, *comparison.intervals[label]))
        body.append([label, str(comparison.scores[label].size), *intervals])
    lines += text_table(header, body)
    if comparison.improvement:
        lines += ["", "probability of improvement: P(X > Y), a run of X outscoring a run of Y"]
        pairs = comparison.improvement.items()
        body = [[*pair.split(PAIR), *cells(value, *comparison.improvement_cis[pair])] for pair, value in pairs]
        lines += text_table(["X", "Y", "P(X > Y)", "95% CI"], body)
    return "\n".join(lines)
