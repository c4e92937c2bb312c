"""Statistics over seeds: mean, interquartile mean (IQM) and percentile-bootstrap intervals, as
Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (rliable)."""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import scipy.stats


def iqm(values: np.ndarray, axis: int | None = 0) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50% of `values` along `axis`."""
    return scipy.stats.trim_mean(np.asarray(values, dtype=np.float64), 0.25, axis=axis)


def bootstrap_ci(values: np.ndarray, statistic: Callable[..., np.ndarray] = np.mean) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile-bootstrap interval (2000 resamples, seed 0) of `statistic` over runs (axis 0),
    each column resampled independently; one run: its value, twice."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        low, high = bootstrap_ci(values[:, None], statistic)
        return low[0], high[0]
    point = statistic(values, axis=0)
    if values.shape[0] < 2:
        return point, point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Identical runs give a degenerate (zero-width) interval.
        interval = scipy.stats.bootstrap(
            (values,),
            statistic,
            axis=0,
            vectorized=True,
            confidence_level=0.95,
            n_resamples=2000,
            method="percentile",
            random_state=np.random.default_rng(0),
        ).confidence_interval
    low = np.where(np.isfinite(interval.low), interval.low, point)
    return low, np.where(np.isfinite(interval.high), interval.high, point)


def summarize(values: np.ndarray) -> dict[str, float]:
    """Mean, IQM and their 95% bootstrap intervals of final returns (one value per run)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"runs": 0, **dict.fromkeys(("mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high"), np.nan)}
    mean_low, mean_high = bootstrap_ci(values)
    iqm_low, iqm_high = bootstrap_ci(values, iqm)
    return {
        "runs": int(values.size),
        "mean": float(values.mean()),
        "mean_low": float(mean_low),
        "mean_high": float(mean_high),
        "iqm": float(iqm(values)),
        "iqm_low": float(iqm_low),
        "iqm_high": float(iqm_high),
    }
