"""rliable's estimates (Agarwal et al., 2021), made reproducible: stratified-bootstrap intervals,
aggregate metrics, performance profiles and probabilities of improvement over score matrices of
shape (runs, tasks). rliable (and arch, statsmodels under it) is imported on first use, so reading
runs stays quick."""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

# Bootstrap resamples unless told otherwise: few, for speed (rliable's probability of
# improvement takes about 1.4 ms a resample per pair here); rliable's papers use 50,000
# (scripts/plot.py --reps).
DEFAULT_REPS = 1000
CONFIDENCE = 0.95
SEED = 0  # The bootstrap's seed: the same runs always give the same intervals.
# The aggregates of normalised scores, as rliable names and computes them.
AGGREGATE_METRICS = ("IQM", "mean", "optimality gap")


def _rliable() -> tuple[Any, Any]:
    logging.getLogger("matplotlib.font_manager").addFilter(lambda record: "font cache" not in record.getMessage())
    from rliable import library, metrics

    return library, metrics


@contextlib.contextmanager
def _seeded(seed: int = SEED) -> Iterator[None]:
    """rliable's bootstraps draw from numpy's global generator (their `random_state` argument is
    ignored by the resampling): seed it, and give the caller's state back afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # Identical runs: a zero-width interval.
            yield
    finally:
        np.random.set_state(state)


def metric_functions() -> dict[str, Callable[[np.ndarray], float]]:
    """AGGREGATE_METRICS' rliable functions of a (runs, tasks) matrix."""
    _, metrics = _rliable()
    return {
        "IQM": metrics.aggregate_iqm,
        "mean": metrics.aggregate_mean,
        "optimality gap": metrics.aggregate_optimality_gap,
    }


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean over every run and task: the mean of the middle 50% (rliable's)."""
    _, metrics = _rliable()
    return float(metrics.aggregate_iqm(np.asarray(scores, dtype=np.float64)))


def interval_estimates(
    score_dict: Mapping[str, np.ndarray | Sequence[np.ndarray]],
    function: Callable[..., np.ndarray],
    reps: int = DEFAULT_REPS,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """rliable's point estimates of `function` per key and their 95% stratified-bootstrap percentile
    intervals (lows in row 0, highs in row 1), each key's bootstrap seeded alike, so a group's
    interval does not depend on which other groups are compared with it."""
    library, _ = _rliable()
    points, intervals = {}, {}
    for key, scores in score_dict.items():
        with _seeded():
            point, interval = library.get_interval_estimates(
                {key: scores}, function, reps=reps, confidence_interval_size=CONFIDENCE
            )
        points[key], intervals[key] = np.asarray(point[key]), np.asarray(interval[key])
    return points, intervals


def aggregate_metrics(
    score_dict: Mapping[str, np.ndarray], reps: int = DEFAULT_REPS
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """IQM, mean and optimality gap (at 1) of each group's (runs, tasks) normalised scores, with
    95% stratified-bootstrap intervals: point estimates (one per metric) and (2, metrics) intervals."""
    functions = list(metric_functions().values())
    return interval_estimates(score_dict, lambda scores: np.array([f(scores) for f in functions]), reps)


def _score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's score distribution (the fraction of all runs' scores above each tau) at every tau
    at once: its own np.vectorize over taus takes most of a bootstrap's time."""
    return np.mean(np.asarray(scores).reshape(-1, 1) > np.asarray(taus).reshape(1, -1), axis=0)


def performance_profiles(
    score_dict: Mapping[str, np.ndarray], taus: np.ndarray, reps: int = DEFAULT_REPS
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each group's fraction of runs scoring above each tau (rliable's score distribution), with
    95% stratified-bootstrap bands (each group's seeded alike)."""
    library, _ = _rliable()
    profiles, bands = {}, {}
    for key, scores in score_dict.items():
        with _seeded():
            profile, band = library.create_performance_profile(
                {key: scores},
                taus,
                custom_profile_func=_score_distribution,
                reps=reps,
                confidence_interval_size=CONFIDENCE,
            )
        profiles[key], bands[key] = profile[key], band[key]
    return profiles, bands


def probabilities_of_improvement(
    score_dict: Mapping[str, np.ndarray], pairs: Sequence[tuple[str, str]], reps: int = DEFAULT_REPS
) -> list[dict[str, Any]]:
    """P(X > Y) for each pair of groups: the chance that a run of X outscores a run of Y on the same
    task (Mann-Whitney), averaged over tasks, with its 95% bootstrap interval (each group's runs
    resampled on their own, rliable's independent stratified bootstrap)."""
    _, metrics = _rliable()
    paired = {f"{x}\x1f{y}": [score_dict[x], score_dict[y]] for x, y in pairs}
    points, intervals = interval_estimates(paired, metrics.probability_of_improvement, reps)
    return [
        {
            "x": x,
            "y": y,
            "probability": float(points[key]),
            "low": float(intervals[key][0]),
            "high": float(intervals[key][1]),
        }
        for (x, y), key in zip(pairs, paired)
    ]


def summarize(values: Sequence[float], reps: int = DEFAULT_REPS) -> dict[str, float]:
    """Mean, IQM and their 95% bootstrap intervals of one value per run (non-finite ones dropped)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"runs": 0, **dict.fromkeys(("mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high"), np.nan)}
    functions = metric_functions()
    points, intervals = interval_estimates(
        {"runs": values[:, None]},
        lambda scores: np.array([functions["mean"](scores), functions["IQM"](scores)]),
        reps,
    )
    (mean, iqm_value), interval = points["runs"], intervals["runs"]
    return {
        "runs": int(values.size),
        "mean": float(mean),
        "mean_low": float(interval[0, 0]),
        "mean_high": float(interval[1, 0]),
        "iqm": float(iqm_value),
        "iqm_low": float(interval[0, 1]),
        "iqm_high": float(interval[1, 1]),
    }


def mean_band(values: np.ndarray, reps: int = DEFAULT_REPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean over runs (axis 0) of (runs, points) curves and its 95% bootstrap band, each point's
    runs resampled on their own (rliable's stratified bootstrap, points as strata); one run (or no
    resamples asked): no band."""
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean(axis=0)
    if values.shape[0] < 2 or reps <= 0:
        return mean, mean, mean
    _, intervals = interval_estimates({"curve": values}, lambda scores: np.mean(scores, axis=0), reps)
    low, high = intervals["curve"]
    return mean, np.where(np.isfinite(low), low, mean), np.where(np.isfinite(high), high, mean)
