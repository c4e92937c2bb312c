"""What every learning-curve figure shares, so that a figure can go into a paper as it is: a title naming the
agent and the environment, axes that start at step 0 and do not zoom a return's wobble into a collapse, and
legend entries short enough to leave the curves most of the width."""

from __future__ import annotations

import textwrap
from typing import Any, Iterable, Sequence

import numpy as np

from rl.analysis.score_ranges import SCORE_RANGES
from rl.analysis.runs import DEFAULT_METRIC, Run

METRIC_NAMES = {DEFAULT_METRIC: "evaluation return"}  # The y-axis label of a known metric.
RETURN_COLUMNS = ("episode_return",)  # Metrics whose axis covers the environment's returns (see return_bounds).
Y_PADDING = 0.05  # Of the axis' span, above and below what it must show.
LEGEND_WIDTH = 26  # Characters a legend entry's line may take before it wraps.
LEGEND_STYLE = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, "frameon": False}
LEGEND_STYLE.update(fontsize="small", title_fontsize="small")


def metric_name(metric: str) -> str:
    """`metric` as an axis says it: "evaluation return" for the evaluator's episode return."""
    return METRIC_NAMES.get(metric, metric)


def _names(values: Iterable[str | None]) -> str:
    return ", ".join(dict.fromkeys(value for value in values if value)) or "?"


def title(runs: Sequence[Run]) -> str:
    """What the runs trained and where: "PPO on CartPole-v1" (several agents or environments: listed)."""
    agents = _names((run.setting("agent") or "").upper() for run in runs)
    return f"{agents} on {_names(run.task for run in runs)}"


def return_bounds(runs: Sequence[Run], metric: str) -> tuple[float, float] | None:
    """The returns a return's axis covers whatever the curves: from a uniformly random policy's return to the
    solved one (rl.analysis.score_ranges.SCORE_RANGES) when every environment has them, else 0. None: the metric
    is not a return, and its axis fits its values."""
    if metric.rsplit("/", 1)[-1] not in RETURN_COLUMNS:
        return None
    ranges = [SCORE_RANGES.get(run.task) for run in runs]
    if not ranges or any(bounds is None for bounds in ranges):
        return (0.0, 0.0)
    return (min(low for low, _ in ranges), max(high for _, high in ranges))


def finish_axes(ax: Any, runs: Sequence[Run], metric: str) -> None:
    """Steps from 0 on x; on y, the values and return_bounds, padded by Y_PADDING of the span; light grid."""
    from matplotlib.ticker import EngFormatter

    ax.set(xlabel="actor steps", ylabel=metric_name(metric))
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlim(left=0.0)
    bounds = return_bounds(runs, metric)
    data = ax.dataLim
    if bounds is not None and np.isfinite([data.y0, data.y1]).all():
        low, high = min(data.y0, bounds[0]), max(data.y1, bounds[1])
        pad = Y_PADDING * ((high - low) or 1.0)
        ax.set_ylim(low - pad, high + pad)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def legend_label(label: str, runs: int | None = None) -> str:
    """A legend entry: a long "k=v, k=v" label one setting a line, wrapped at LEGEND_WIDTH; (n=runs) when given."""
    parts = label.split(", ") if len(label) > LEGEND_WIDTH else [label]
    lines = [line for part in parts for line in textwrap.wrap(part, LEGEND_WIDTH) or [part]]
    if runs is not None:
        lines[-1] += f" (n={runs})"
    return "\n".join(lines)


def figure_width(labels: Sequence[str]) -> float:
    """Inches: the axes' 6.4 and the legend's widest line beside them."""
    widest = max((len(line) for label in labels for line in label.splitlines()), default=0)
    return 6.4 + (0.3 + 0.075 * widest if labels else 0.0)
