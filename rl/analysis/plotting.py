"""Learning curves per group (mean over seeds with a 95% bootstrap band) and final-return tables.

Groups of fewer than MIN_BAND_RUNS runs get no band (a bootstrap over one or two runs
says nothing); their runs are drawn as thin lines and the legend says so.

Only matplotlib's object API is used (no pyplot), so nothing needs a display or an
interactive backend; notebooks can still show the returned figure.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import numpy as np


class _FontCacheNotice(logging.Filter):
    """Drops matplotlib's one-off "building the font cache" notice: nothing is wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "font cache" not in record.getMessage()


logging.getLogger("matplotlib.font_manager").addFilter(_FontCacheNotice())

from matplotlib.figure import Figure  # noqa: E402 - after the filter: importing may build the cache.
from matplotlib.ticker import EngFormatter  # noqa: E402

from rl.analysis.runs import DEFAULT_METRIC, Run  # noqa: E402
from rl.analysis.stats import bootstrap_ci, summarize  # noqa: E402

MAX_CURVE_POINTS = 400
# Fewer runs than this give a bootstrap band that means nothing: no band is drawn.
MIN_BAND_RUNS = 3
# Legend entries per column.
LEGEND_ROWS = 16


def common_grid(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The steps at which every run of a group has data: the union of their steps, within
    the range all runs cover (at most MAX_CURVE_POINTS of them)."""
    curves = [(steps, values) for steps, values in curves if steps.size]
    if not curves:
        return np.zeros(0)
    start = max(steps[0] for steps, _ in curves)
    stop = min(steps[-1] for steps, _ in curves)
    if stop < start:  # No overlap: fall back to the whole range.
        start, stop = min(s[0] for s, _ in curves), max(s[-1] for s, _ in curves)
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= start) & (grid <= stop)]
    if grid.size > MAX_CURVE_POINTS:
        grid = np.linspace(start, stop, MAX_CURVE_POINTS)
    return grid


def aggregate_curves(runs: Sequence[Run], metric: str = DEFAULT_METRIC) -> dict[str, np.ndarray]:
    """Steps, mean and the 95% bootstrap interval of the mean over `runs`."""
    curves = [run.curve(metric) for run in runs]
    grid = common_grid(curves)
    if grid.size == 0:
        empty = np.zeros(0)
        return {"steps": empty, "mean": empty, "low": empty, "high": empty, "runs": np.zeros((0, 0))}
    values = np.stack([np.interp(grid, steps, curve) for steps, curve in curves if steps.size])
    low, high = bootstrap_ci(values)
    return {"steps": grid, "mean": values.mean(axis=0), "low": low, "high": high, "runs": values}


def _legend_title(hue: str | None, band: bool, few: bool, thin: bool) -> str:
    """What the legend's entries are and what the lines and bands mean."""
    lines = [", ".join(key.strip() for key in hue.split(",")) if hue else "runs"]
    lines.append("line: mean over the group's runs")
    if band:
        lines.append("band: 95% bootstrap CI of the mean")
    if few:
        lines.append(f"no band under {MIN_BAND_RUNS} runs (too few for a bootstrap)")
    if thin:
        lines.append("thin lines: the runs of such a group")
    return "\n".join(lines)


def plot_curves(
    groups: Mapping[str, Sequence[Run]],
    metric: str = DEFAULT_METRIC,
    hue: str | None = None,
    title: str | None = None,
    ax: Any = None,
) -> Figure:
    """Mean curve per group against actor steps, with a 95% bootstrap band of the mean
    where the group has at least MIN_BAND_RUNS runs (fewer make the band meaningless:
    their single runs are drawn as thin lines instead).

    The legend sits outside the axes, to their right, and says what lines and bands are;
    a figure made here is wide enough for it and lays itself out (constrained layout), so
    no label or title is cut. Save with `bbox_inches="tight"` all the same.
    """
    labels = [f"{label} (n={len(runs)})" for label, runs in groups.items()]
    if ax is None:
        longest = max((len(label) for label in labels), default=0)
        width = min(7.5 + 0.065 * longest * (1 + (len(labels) - 1) // LEGEND_ROWS), 24.0)
        figure = Figure(figsize=(width, 4.5), dpi=150, layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = ax.figure
    colors = [f"C{i}" for i in range(10)]
    band = few = thin = False
    for index, ((_label, runs), legend_label) in enumerate(zip(groups.items(), labels)):
        curve = aggregate_curves(runs, metric)
        if curve["steps"].size == 0:
            continue
        color = colors[index % len(colors)]
        marker = "o" if curve["steps"].size <= 25 else None  # Sparse evaluations: show the points.
        ax.plot(
            curve["steps"],
            curve["mean"],
            color=color,
            linewidth=2,
            marker=marker,
            markersize=4,
            label=legend_label,
        )
        if len(runs) < MIN_BAND_RUNS:
            few = True
            if len(runs) > 1:
                thin = True
                for values in curve["runs"]:
                    ax.plot(curve["steps"], values, color=color, linewidth=0.8, alpha=0.4)
        elif curve["steps"].size == 1:
            band = True
            error = [curve["mean"] - curve["low"], curve["high"] - curve["mean"]]
            ax.errorbar(curve["steps"], curve["mean"], yerr=error, color=color, capsize=4, linewidth=1.5)
        else:
            band = True
            ax.fill_between(curve["steps"], curve["low"], curve["high"], color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel("actor steps")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or metric, wrap=True)
    if groups:
        legend = ax.legend(
            title=_legend_title(hue, band, few, thin),
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
            frameon=False,
            fontsize="small",
            title_fontsize="small",
            ncols=1 + (len(labels) - 1) // LEGEND_ROWS,
        )
        legend.set_alignment("left")  # The title's lines left-aligned with the entries.
    return figure


def final_table(groups: Mapping[str, Sequence[Run]], metric: str = DEFAULT_METRIC) -> list[dict[str, Any]]:
    """One row per group: the final values of `metric` summarised over its runs."""
    return [{"group": label, **summarize([run.final(metric) for run in runs])} for label, runs in groups.items()]


def _number(value: float) -> str:
    return "nan" if not math.isfinite(value) else f"{value:.1f}"


def format_table(rows: Sequence[Mapping[str, Any]], hue: str | None = None, metric: str = DEFAULT_METRIC) -> str:
    """A plain-text table: group, runs, mean [95% CI], IQM [95% CI]; a group of fewer
    than MIN_BAND_RUNS runs gets `-` for its intervals, as it gets no band in the figure."""
    header = [hue or "group", "runs", "mean", "95% CI", "IQM", "IQM 95% CI"]

    def interval(row: Mapping[str, Any], low: str, high: str) -> str:
        if row["runs"] < MIN_BAND_RUNS:
            return "-"
        return f"[{_number(row[low])}, {_number(row[high])}]"

    body = [
        [
            str(row["group"]),
            str(row["runs"]),
            _number(row["mean"]),
            interval(row, "mean_low", "mean_high"),
            _number(row["iqm"]),
            interval(row, "iqm_low", "iqm_high"),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [f"final {metric} per group"]
    for index, line in enumerate([header, *body]):
        cells = [cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(line)]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    if any(row["runs"] < MIN_BAND_RUNS for row in rows):
        lines.append(f"CI: 95% percentile bootstrap over runs; - : fewer than {MIN_BAND_RUNS} runs, too few for one")
    return "\n".join(lines)
