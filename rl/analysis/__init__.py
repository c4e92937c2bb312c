"""Finding scripts/train.py's runs (however deeply nested in a sweep; a many-seed run as its `seed_<i>/`
replicas), grouping them, and each group's learning curve and final values with rliable's intervals;
rl.analysis.aggregates compares the groups with rliable on normalised scores."""

from __future__ import annotations

from rl.analysis.aggregates import DEFAULT_REPS, summarize
from rl.analysis.curves import MIN_BAND_RUNS, aggregate_curve, plot_curves
from rl.analysis.groups import IGNORED_HUE_KEYS, group_runs, short_keys, short_value, varying_keys
from rl.analysis.runs import DEFAULT_METRIC, Run, find_runs, is_run_directory, load_run
from rl.analysis.tables import final_table, format_table

SCORES = ("final_eval_return", "last_evals_mean", "eval_return_auc", "objective")  # "objective": its config's.

__all__ = [
    "DEFAULT_METRIC",
    "DEFAULT_REPS",
    "IGNORED_HUE_KEYS",
    "MIN_BAND_RUNS",
    "SCORES",
    "Run",
    "aggregate_curve",
    "find_runs",
    "final_table",
    "format_table",
    "group_runs",
    "is_run_directory",
    "load_run",
    "plot_curves",
    "short_keys",
    "short_value",
    "summarize",
    "varying_keys",
]
