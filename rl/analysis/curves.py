"""Learning curves per group (mean over runs with a 95% bootstrap band against actor steps) and
the table of final values (mean and IQM with 95% bootstrap intervals), both over rliable's
estimates (rl.analysis.statistics)."""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import numpy as np

from rl.analysis.runs import DEFAULT_METRIC, Run
from rl.analysis.statistics import DEFAULT_REPS, mean_band, summarize

# Drops matplotlib's one-off "building the font cache" notice.
logging.getLogger("matplotlib.font_manager").addFilter(lambda record: "font cache" not in record.getMessage())

MAX_CURVE_POINTS = 400
MIN_BAND_RUNS = 3  # Fewer runs get no band: their curves are drawn thin.
LEGEND_ROWS = 16  # Legend entries per column.


def mean_curve(curves: Sequence[tuple[np.ndarray, np.ndarray]], reps: int = DEFAULT_REPS) -> dict[str, np.ndarray]:
    """The mean of the (steps, values) curves ("value"), its 95% bootstrap band ("low", "high") and
    the curves ("runs"), interpolated at their steps within the range all cover."""
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
    mean, low, high = mean_band(values, reps)
    return {"steps": grid, "value": mean, "low": low, "high": high, "runs": values}


def plot_curves(
    groups: Mapping[str, Sequence[Run]],
    metric: str = DEFAULT_METRIC,
    hue: str | None = None,
    title: str | None = None,
    reps: int = DEFAULT_REPS,
) -> Any:
    """Mean curve per group against actor steps with its 95% bootstrap band (save with bbox_inches="tight")."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    labels = [f"{label} (n={len(runs)})" for label, runs in groups.items()]
    columns = 1 + (len(labels) - 1) // LEGEND_ROWS
    longest = max((len(label) for label in labels), default=0)
    figure = Figure(figsize=(min(7.5 + 0.065 * longest * columns, 24.0), 4.5), dpi=150, layout="constrained")
    ax = figure.add_subplot()
    band = few = thin = False
    for index, (runs, legend_label) in enumerate(zip(groups.values(), labels)):
        curve = mean_curve([run.curve(metric) for run in runs], reps if len(runs) >= MIN_BAND_RUNS else 0)
        if curve["steps"].size == 0:
            continue
        color = f"C{index % 10}"
        marker = "o" if curve["steps"].size <= 25 else None  # Sparse evaluations: show the points.
        ax.plot(
            curve["steps"], curve["value"], color=color, linewidth=2, marker=marker, markersize=4, label=legend_label
        )
        if len(runs) < MIN_BAND_RUNS:
            few = True
            if len(runs) > 1:
                thin = True
                for values in curve["runs"]:
                    ax.plot(curve["steps"], values, color=color, linewidth=0.8, alpha=0.4)
        elif curve["steps"].size == 1:
            band = True
            error = [curve["value"] - curve["low"], curve["high"] - curve["value"]]
            ax.errorbar(curve["steps"], curve["value"], yerr=error, color=color, capsize=4, linewidth=1.5)
        else:
            band = True
            ax.fill_between(curve["steps"], curve["low"], curve["high"], color=color, alpha=0.2, linewidth=0)
    ax.set(xlabel="actor steps", ylabel=metric)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or metric, wrap=True)
    if groups:
        legend = [
            ", ".join(key.strip() for key in hue.split(",")) if hue else "runs",
            "line: mean over the group's runs",
        ]
        legend += ["band: 95% bootstrap CI of the mean"] * band
        legend += [f"no band under {MIN_BAND_RUNS} runs (too few for a bootstrap)"] * few
        legend += ["thin lines: the runs of such a group"] * thin
        ax.legend(
            title="\n".join(legend),
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
            frameon=False,
            fontsize="small",
            title_fontsize="small",
            ncols=columns,
        ).set_alignment("left")  # The title's lines left-aligned with the entries.
    return figure


def final_table(
    groups: Mapping[str, Sequence[Run]], metric: str = DEFAULT_METRIC, reps: int = DEFAULT_REPS
) -> list[dict[str, Any]]:
    """One row per group: the final values of `metric` summarised over its runs."""
    return [{"group": label, **summarize([run.final(metric) for run in runs], reps)} for label, runs in groups.items()]


def _number(value: float) -> str:
    return "nan" if not math.isfinite(value) else f"{value:.1f}"


def format_table(rows: Sequence[Mapping[str, Any]], hue: str | None = None, metric: str = DEFAULT_METRIC) -> str:
    """A plain-text table: group, runs, mean [95% CI], IQM [95% CI] (`-` under MIN_BAND_RUNS runs)."""
    header = [hue or "group", "runs", "mean", "95% CI", "IQM", "IQM 95% CI"]

    def interval(row: Mapping[str, Any], name: str) -> str:
        if row["runs"] < MIN_BAND_RUNS:
            return "-"
        return f"[{_number(row[name + '_low'])}, {_number(row[name + '_high'])}]"

    body = [
        [str(row["group"]), str(row["runs"]), _number(row["mean"]), interval(row, "mean")]
        + [_number(row["iqm"]), interval(row, "iqm")]
        for row in rows
    ]
    widths = [max(map(len, column)) for column in zip(header, *body)]
    lines = [f"final {metric} per group"]
    for index, line in enumerate([header, *body]):
        lines.append("  ".join([line[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(line[1:], widths[1:]))]))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    if any(row["runs"] < MIN_BAND_RUNS for row in rows):
        lines.append(f"CI: 95% percentile bootstrap over runs; - : fewer than {MIN_BAND_RUNS} runs, too few for one")
    return "\n".join(lines)
