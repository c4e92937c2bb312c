"""Each group's learning curve against actor steps: the mean over its runs and rliable's 95% bootstrap band."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rl.analysis.aggregates import DEFAULT_REPS, estimates
from rl.analysis.runs import DEFAULT_METRIC, Run

MAX_CURVE_POINTS = 400
MIN_BAND_RUNS = 3  # Fewer runs get no band: their curves are drawn thin.
LEGEND_ROWS = 16  # Legend entries per column.
LEGEND_STYLE = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, "frameon": False}
LEGEND_STYLE.update(fontsize="small", title_fontsize="small")


def aggregate_curve(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], statistic: Callable = np.mean, reps: int = DEFAULT_REPS
) -> dict[str, np.ndarray]:
    """`statistic(values, axis=0)` of (steps, values) curves at the steps all cover, its 95% band ("low", "high";
    rliable's stratified bootstrap, each point a stratum; none under 2 runs or reps) and the "runs"."""
    curves = [(steps, values) for steps, values in curves if steps.size]
    if not curves:
        return {**dict.fromkeys(("steps", "value", "low", "high"), np.zeros(0)), "runs": np.zeros((0, 0))}
    start, stop = max(steps[0] for steps, _ in curves), min(steps[-1] for steps, _ in curves)
    if stop < start:
        start, stop = min(s[0] for s, _ in curves), max(s[-1] for s, _ in curves)
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
    """Each group's mean curve against actor steps, with its 95% bootstrap band (save with bbox_inches="tight")."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    labels = [f"{label} (n={len(runs)})" for label, runs in groups.items()]
    columns = 1 + (len(labels) - 1) // LEGEND_ROWS
    width = 7.5 + 0.065 * columns * max((len(label) for label in labels), default=0)
    figure = Figure(figsize=(min(width, 24.0), 4.5), dpi=150, layout="constrained")
    ax = figure.add_subplot()
    for index, (runs, label) in enumerate(zip(groups.values(), labels)):
        curve = aggregate_curve([run.curve(metric) for run in runs], reps=reps if len(runs) >= MIN_BAND_RUNS else 0)
        color = f"C{index % 10}"
        marker = "o" if curve["steps"].size <= 25 else None  # Sparse evaluations: show the points.
        ax.plot(curve["steps"], curve["value"], color=color, linewidth=2, marker=marker, markersize=4, label=label)
        ax.fill_between(curve["steps"], curve["low"], curve["high"], color=color, alpha=0.2, linewidth=0)
        for values in curve["runs"] if len(runs) < MIN_BAND_RUNS else []:
            ax.plot(curve["steps"], values, color=color, linewidth=0.8, alpha=0.4)
    ax.set(xlabel="actor steps", ylabel=metric)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or metric, wrap=True)
    legend = f"{hue or 'runs'}\nline: the mean over a group's runs, band: its 95% bootstrap CI"
    legend += f"\nno band under {MIN_BAND_RUNS} runs (too few for a bootstrap): thin lines, the runs"
    if groups:  # Beside the axes, the title's lines left-aligned with the entries.
        ax.legend(title=legend, ncols=columns, **LEGEND_STYLE).set_alignment("left")
    return figure
