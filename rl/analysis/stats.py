"""Aggregate statistics over seeds: mean, interquartile mean and bootstrap confidence intervals.

The interquartile mean (IQM) and percentile-bootstrap intervals follow Agarwal et al.,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice" (rliable): the
IQM drops the top and bottom quarter of runs, so one lucky or broken seed moves it less
than the mean.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
N_RESAMPLES = 2000


def iqm(values: np.ndarray, axis: int | None = 0) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50% of `values` along `axis`."""
    return scipy.stats.trim_mean(np.asarray(values, dtype=np.float64), 0.25, axis=axis)


def _mean(values: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.mean(values, axis=axis)


def bootstrap_ci(
    values: np.ndarray,
    statistic: Callable[..., np.ndarray] = _mean,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap interval of `statistic` over runs (axis 0 of `values`).

    `values` has one row per run and any number of columns (points of a curve), each
    resampled independently. With a single run the interval collapses onto its value.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        low, high = bootstrap_ci(values[:, None], statistic, confidence, n_resamples, seed)
        return low[0], high[0]
    point = statistic(values, axis=0)
    if values.shape[0] < 2:
        return point, point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Identical runs give a degenerate (zero-width) interval.
        result = scipy.stats.bootstrap(
            (values,),
            statistic,
            axis=0,
            vectorized=True,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
    low = np.where(np.isfinite(result.confidence_interval.low), result.confidence_interval.low, point)
    high = np.where(np.isfinite(result.confidence_interval.high), result.confidence_interval.high, point)
    return low, high


def summarize(values: np.ndarray, seed: int = 0) -> dict[str, float]:
    """Mean, IQM and their 95% bootstrap intervals of final returns (one value per run)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        nan = float("nan")
        return {"runs": 0, "mean": nan, "mean_low": nan, "mean_high": nan, "iqm": nan, "iqm_low": nan, "iqm_high": nan}
    mean_low, mean_high = bootstrap_ci(values, _mean, seed=seed)
    iqm_low, iqm_high = bootstrap_ci(values, iqm, seed=seed)
    return {
        "runs": int(values.size),
        "mean": float(values.mean()),
        "mean_low": float(mean_low),
        "mean_high": float(mean_high),
        "iqm": float(iqm(values)),
        "iqm_low": float(iqm_low),
        "iqm_high": float(iqm_high),
    }
