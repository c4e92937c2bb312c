"""Reading finished runs and sweeps: curves, grouping, IQM and bootstrap confidence intervals."""

from rl.analysis.plotting import final_table, format_table, plot_curves
from rl.analysis.runs import DEFAULT_METRIC, find_runs, group_runs, load_run, varying_keys
from rl.analysis.stats import bootstrap_ci, iqm, summarize

__all__ = [
    "DEFAULT_METRIC",
    "bootstrap_ci",
    "final_table",
    "find_runs",
    "format_table",
    "group_runs",
    "iqm",
    "load_run",
    "plot_curves",
    "summarize",
    "varying_keys",
]
