"""Each group's learning curve against actor steps: the mean over its runs and rliable's 95% bootstrap band."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rl.analysis import figures
from rl.analysis.aggregates import DEFAULT_REPS, estimates
from rl.analysis.groups import short_keys
from rl.analysis.runs import DEFAULT_METRIC, Run

MAX_CURVE_POINTS = 400
MIN_BAND_RUNS = 2  # Runs a bootstrap interval needs (as --aggregate computes it); one run is a line alone.
LEGEND_ROWS = 16  # Legend entries per column.
MAX_MARKED_POINTS = 25  # Curves with at most this many evaluations show each as a point.


def aggregate_curve(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], statistic: Callable = np.mean, reps: int = DEFAULT_REPS
) -> dict[str, np.ndarray]:
    """`statistic(values, axis=0)` of (steps, values) curves at the steps all cover, its 95% band ("low", "high";
    rliable's stratified bootstrap, each point a stratum; none under 2 runs or reps) and the "runs"."""
    curves = [(steps, values) for steps, values in curves if steps.size]
    if not curves:
        return {**dict.fromkeys(("steps", "value", "low", "high"), np.zeros(0)), "runs": np.zeros((0, 0))}
    start = max(steps[0] for steps, _ in curves)
    stop = min(steps[-1] for steps, _ in curves)
    if stop < start:
        start = min(s[0] for s, _ in curves)
        stop = max(s[-1] for s, _ in curves)
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= start) & (grid <= stop)]
    grid = np.linspace(start, stop, MAX_CURVE_POINTS) if grid.size > MAX_CURVE_POINTS else grid
    values = np.stack([np.interp(grid, steps, curve) for steps, curve in curves])
    value = low = high = statistic(values, axis=0)
    if len(curves) > 1 and reps > 0:
        _, intervals = estimates({"curve": values}, lambda scores: statistic(scores, axis=0), reps)
        low, high = intervals["curve"]
    return {"steps": grid, "value": value, "low": low, "high": high, "runs": values}


def plot_curves(
    groups: Mapping[str, Sequence[Run]],
    metric: str = DEFAULT_METRIC,
    hue: str | None = None,
    title: str | None = None,
    reps: int = DEFAULT_REPS,
) -> Any:
    """Each group's mean curve against actor steps with its 95% bootstrap band, titled with the agent and the
    environment, the line and band said once under the title (save with bbox_inches="tight")."""
    from matplotlib.figure import Figure

    counts = [len(runs) for runs in groups.values()]
    show_counts = len(set(counts)) > 1  # Equal counts are said once, under the title.
    labels = [figures.legend_label(label, n if show_counts else None) for label, n in zip(groups, counts)]
    labels = labels if len(groups) > 1 else []  # One group: the title says it all.
    columns = max(1, -(-len(labels) // LEGEND_ROWS))
    figure = Figure(figsize=(min(figures.figure_width(labels) * columns, 24.0), 4.5), dpi=150, layout="constrained")
    ax = figure.add_subplot()
    for index, (runs, label) in enumerate(zip(groups.values(), labels or [None])):
        curve = aggregate_curve([run.curve(metric) for run in runs], reps=reps if len(runs) >= MIN_BAND_RUNS else 0)
        color = f"C{index % 10}"
        marker = "o" if curve["steps"].size <= MAX_MARKED_POINTS else None  # Sparse evaluations: the points.
        ax.plot(curve["steps"], curve["value"], color=color, linewidth=2, marker=marker, markersize=4, label=label)
        ax.fill_between(curve["steps"], curve["low"], curve["high"], color=color, alpha=0.2, linewidth=0)
    everyone = [run for runs in groups.values() for run in runs]
    figures.finish_axes(ax, everyone, metric)
    figure.suptitle(title or figures.title(everyone))
    ax.set_title(describe(counts, metric), fontsize="small")
    if labels:  # Beside the axes, titled with what tells the groups apart.
        keys = [key.strip() for key in (hue or "").split(",") if key.strip()]
        name = ", ".join(short_keys(keys).values()) or None
        ax.legend(title=name, ncols=columns, **figures.LEGEND_STYLE).set_alignment("left")
    return figure


def describe(counts: Sequence[int], metric: str = DEFAULT_METRIC) -> str:
    """What a curve and its band are, given each group's number of runs: said once, not in every entry."""
    name, groups = figures.metric_name(metric), len(counts)
    if set(counts) <= {1}:
        return f"{name}, one run" + (" per group" if groups > 1 else "")
    whose = "each group's" if groups > 1 else "the"
    runs = f"{counts[0]} runs" if len(set(counts)) == 1 else "runs (n: in the legend)"
    text = f"{name}: the mean of {whose} {runs}, band: 95% bootstrap CI"
    return text + (" (none for a single run)" if min(counts) < MIN_BAND_RUNS else "")
