"""Reading finished runs and sweeps and comparing groups of them: learning curves and final-value
tables per group (rl.analysis.curves), and rliable's aggregates of normalised scores, performance
profiles and probabilities of improvement (rl.analysis.aggregates); every interval is rliable's
stratified bootstrap (rl.analysis.statistics). Runs are found and grouped by rl.analysis.runs."""

from rl.analysis.aggregates import (
    SCORE_RANGES,
    Comparison,
    ScoreError,
    compare,
    format_comparison,
    normalised_scores,
    parse_score_range,
    save_figures,
    score_ranges,
)
from rl.analysis.curves import final_table, format_table, mean_curve, plot_curves
from rl.analysis.runs import (
    DEFAULT_METRIC,
    SCORES,
    Run,
    default_keys,
    find_runs,
    group_runs,
    load_run,
    short_keys,
    short_value,
    varying_keys,
)
from rl.analysis.statistics import DEFAULT_REPS, interval_estimates, iqm, summarize

__all__ = [
    "DEFAULT_METRIC",
    "DEFAULT_REPS",
    "SCORES",
    "SCORE_RANGES",
    "Comparison",
    "Run",
    "ScoreError",
    "compare",
    "default_keys",
    "final_table",
    "find_runs",
    "format_comparison",
    "format_table",
    "group_runs",
    "interval_estimates",
    "iqm",
    "load_run",
    "mean_curve",
    "normalised_scores",
    "parse_score_range",
    "plot_curves",
    "save_figures",
    "score_ranges",
    "short_keys",
    "short_value",
    "summarize",
    "varying_keys",
]
