"""Reading finished runs and sweeps (scripts/train.py's directories, however deeply nested; a
many-seed run as its `seed_<i>/` replicas), grouping them, and their curves and final-return
tables: mean and IQM with 95% percentile-bootstrap intervals over seeds (rliable's)."""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import logging
import math
import os
import re
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import scipy.stats
import yaml

# Drops matplotlib's one-off "building the font cache" notice.
logging.getLogger("matplotlib.font_manager").addFilter(lambda record: "font cache" not in record.getMessage())

DEFAULT_METRIC = "evaluator/episode_return"
# Overrides that never name a group of runs.
IGNORED_HUE_KEYS = ("seed", "hydra", "progress", "checkpoint", "logger")
# summary.json fields that stand in for settings when a run has no .hydra/ directory.
SUMMARY_SETTINGS = ("agent", "environment", "seed")
MAX_CURVE_POINTS = 400
MIN_BAND_RUNS = 3  # Fewer runs get no band: their curves are drawn thin.
LEGEND_ROWS = 16  # Legend entries per column.


@dataclasses.dataclass
class Run:
    path: str
    overrides: dict[str, str]
    config: dict[str, Any]
    choices: dict[str, Any]
    summary: dict[str, Any] | None

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    def setting(self, key: str) -> str | None:
        """`key`'s value as a string: an override, a group's option (`agent`) or a dotted config key."""
        if key in self.overrides:
            return self.overrides[key]
        if self.choices.get(key) is not None:
            return str(self.choices[key])
        node: Any = self.config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None and key in SUMMARY_SETTINGS and (self.summary or {}).get(key) is not None:
            return str(self.summary[key])
        return None if node is None or isinstance(node, (Mapping, list)) else str(node)

    def curve(self, metric: str = DEFAULT_METRIC) -> tuple[np.ndarray, np.ndarray]:
        """Actor steps and values of `metric` ("<label>/<column>" of `logs/<label>.csv`, a bare column
        the evaluator's), sorted by steps."""
        label, _, column = metric.partition("/")
        if not column:
            label, column = "evaluator", label
        path = os.path.join(self.path, "logs", f"{label}.csv")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist (metric {metric})")
        steps, values = [], []
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            columns = reader.fieldnames or []
            if column not in columns or "actor_steps" not in columns:
                raise KeyError(f"{path} has no column '{column}' (columns: {', '.join(columns)})")
            for row in reader:
                try:
                    steps.append(float(row["actor_steps"]))
                    values.append(float(row[column]))
                except (TypeError, ValueError):
                    continue
        order = np.argsort(np.asarray(steps), kind="stable")
        return np.asarray(steps)[order], np.asarray(values, dtype=np.float64)[order]

    def final(self, metric: str = DEFAULT_METRIC) -> float:
        """The last value of `metric`: for the evaluator's return, the final evaluation."""
        if metric == DEFAULT_METRIC and self.summary and "final_eval_return" in self.summary:
            return float(self.summary["final_eval_return"])
        _, values = self.curve(metric)
        return float(values[-1]) if values.size else float("nan")


def _read(path: str, load: Any = yaml.safe_load) -> Any:
    if not os.path.exists(path):
        return None
    with open(path) as file:
        return load(file)


def is_run_directory(path: str) -> bool:
    """Whether `path` holds a run: Hydra's record of one, its logs or its summary."""
    return (
        os.path.isfile(os.path.join(path, ".hydra", "config.yaml"))
        or os.path.isfile(os.path.join(path, "summary.json"))
        or bool(glob.glob(os.path.join(path, "logs", "*.csv")))
    )


def load_run(path: str) -> Run:
    hydra = _read(os.path.join(path, ".hydra", "hydra.yaml")) or {}
    choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    overrides = {}
    for line in _read(os.path.join(path, ".hydra", "overrides.yaml")) or []:
        key, separator, value = str(line).partition("=")
        if separator:
            overrides[key.lstrip("+~")] = value
    summary = _read(os.path.join(path, "summary.json"), json.load)
    config = _read(os.path.join(path, ".hydra", "config.yaml")) or {}
    return Run(os.path.abspath(path), overrides, config, dict(choices), summary)


def find_runs(paths: Sequence[str]) -> list[Run]:
    """Every run in or under `paths`, in path order (a many-seed run: its replicas)."""
    found: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path} is not a directory")
        for root, directories, _ in os.walk(path):
            # Hidden directories (.hydra/, a grid sweep's .grid/) hold no run of their own.
            directories[:] = sorted(
                d for d in directories if not d.startswith(".") and d not in ("wandb", "logs", "checkpoints")
            )
            if is_run_directory(root):
                found.append(root)
                directories[:] = []
    runs = []
    for path in sorted(set(os.path.abspath(p) for p in found), key=_natural_key):
        run = load_run(path)
        names = [os.path.join(path, name) for name in os.listdir(path) if re.fullmatch(r"seed_\d+", name)]
        replicas = []
        for replica in [load_run(p) for p in sorted(names, key=_natural_key) if is_run_directory(p)]:
            seed = (replica.summary or {}).get("seed")
            overrides, config = dict(run.overrides), dict(run.config)
            if seed is not None:
                overrides["seed"], config["seed"] = str(seed), seed
            replicas.append(dataclasses.replace(replica, overrides=overrides, config=config, choices=dict(run.choices)))
        runs += replicas or [run]
    return runs


def _natural_key(path: str) -> list[Any]:
    """Sorts sweep job directories 0, 1, 2, ..., 10 rather than 0, 1, 10, 2."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def varying_keys(runs: Sequence[Run]) -> list[str]:
    """Override keys whose values differ between runs, seeds and plumbing excluded."""
    keys = dict.fromkeys(key for run in runs for key in run.overrides)
    keys = [key for key in keys if key.split(".")[0].split("/")[0] not in IGNORED_HUE_KEYS]
    return [key for key in keys if len({run.setting(key) for run in runs}) > 1]


def short_value(value: str | None) -> str:
    """A setting as a label shows it: numbers rounded to 3 significant figures (0.000123456789 -> 0.000123)."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    mantissa = re.split(r"[eE]", text)[0].lstrip("+-").replace(".", "").lstrip("0").rstrip("0")
    if not math.isfinite(number) or re.fullmatch(r"[+-]?\d+", text) or len(mantissa) <= 3:
        return text
    return f"{number:.3g}"


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key's shortest trailing part no other key ends with (`agent.lr` -> `lr`)."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for start in range(len(parts) - 1, -1, -1):
            name = ".".join(parts[start:])
            if not any(other != key and (other == name or other.endswith("." + name)) for other in keys):
                break
        names[key] = name
    return names


def _sort_value(label: str) -> tuple[int, Any]:
    try:
        return (0, float(label))
    except ValueError:
        return (1, label)


def group_runs(runs: Sequence[Run], hue: str | Sequence[str] | None = None) -> dict[str, list[Run]]:
    """Runs grouped by `hue`'s values (override or config keys); no hue: every override that varies but the seed."""
    if hue is None:
        keys = varying_keys(runs)
    else:
        keys = [key.strip() for key in hue.split(",") if key.strip()] if isinstance(hue, str) else list(hue)
    names = short_keys(keys)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if len(keys) == 1:
            label = short_value(run.setting(keys[0]))
        else:
            label = ", ".join(f"{names[key]}={short_value(run.setting(key))}" for key in keys) or "all runs"
        groups.setdefault(label, []).append(run)
    if len(keys) == 1:
        return dict(sorted(groups.items(), key=lambda item: _sort_value(item[0])))
    return dict(sorted(groups.items()))


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


def aggregate(curves: Sequence[tuple[np.ndarray, np.ndarray]], statistic: Any = np.mean) -> dict[str, np.ndarray]:
    """`statistic` over the (steps, values) curves ("value"), its 95% bootstrap band ("low", "high")
    and the curves ("runs"), interpolated at their steps within the range all cover."""
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
    low, high = bootstrap_ci(values, statistic)
    return {"steps": grid, "value": statistic(values, axis=0), "low": low, "high": high, "runs": values}


def plot_curves(
    groups: Mapping[str, Sequence[Run]],
    metric: str = DEFAULT_METRIC,
    hue: str | None = None,
    title: str | None = None,
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
        curve = aggregate([run.curve(metric) for run in runs])
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


def final_table(groups: Mapping[str, Sequence[Run]], metric: str = DEFAULT_METRIC) -> list[dict[str, Any]]:
    """One row per group: the final values of `metric` summarised over its runs."""
    return [{"group": label, **summarize([run.final(metric) for run in runs])} for label, runs in groups.items()]


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
