"""The final value of a metric per group as a table: mean and IQM with rliable's 95% bootstrap intervals."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rl.analysis.aggregates import DEFAULT_REPS, summarize, text_table
from rl.analysis.curves import MIN_BAND_RUNS
from rl.analysis.runs import DEFAULT_METRIC, Run


def final_table(
    groups: Mapping[str, Sequence[Run]], metric: str = DEFAULT_METRIC, reps: int = DEFAULT_REPS
) -> list[dict[str, Any]]:
    """One row per group: the final values of `metric` summarised over its runs."""
    return [{"group": label, **summarize([run.final(metric) for run in runs], reps)} for label, runs in groups.items()]


def format_table(rows: Sequence[Mapping[str, Any]], hue: str | None = None, metric: str = DEFAULT_METRIC) -> str:
    """Group, runs, mean [95% CI], IQM [95% CI] per row of final_table (`-`: one run, no interval)."""

    def cells(row: Mapping[str, Any], name: str) -> list[str]:
        band = "-" if row["runs"] < MIN_BAND_RUNS else f"[{row[name + '_low']:.1f}, {row[name + '_high']:.1f}]"
        return [f"{row[name]:.1f}", band]

    header = [hue or "group", "runs", "mean", "95% CI", "IQM", "IQM 95% CI"]
    body = [[str(row["group"]), str(row["runs"]), *cells(row, "mean"), *cells(row, "iqm")] for row in rows]
    lines = [f"final {metric} per group", *text_table(header, body)]
    if any(row["runs"] < MIN_BAND_RUNS for row in rows):
        lines.append("CI: 95% percentile bootstrap over runs; - : a single run, no interval")
    return "\n".join(lines)
