"""Finding scripts/train.py's runs (however deeply nested in a sweep; a many-seed run as its `seed_<i>/`
replicas), grouping them, and each group's learning curve and final values with rliable's intervals;
rl.analysis.aggregates compares the groups with rliable on normalised scores."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob
import json
import math
import os
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import yaml

from rl.analysis.aggregates import DEFAULT_REPS, estimates, summarize, text_table

DEFAULT_METRIC = "evaluator/episode_return"
IGNORED_HUE_KEYS = ("seed", "hydra", "progress", "checkpoint", "logger")  # Overrides that never name a group.
SUMMARY_SETTINGS = ("agent", "environment", "seed")  # summary.json's, for a run without .hydra/.
SCORES = ("final_eval_return", "last_evals_mean", "eval_return_auc", "objective")  # "objective": its config's.
RUN_PARTS = ("wandb", "logs", "checkpoints")  # Hold no run of their own, nor do hidden ones (.hydra/, .grid/).
MAX_CURVE_POINTS = 400
MIN_BAND_RUNS = 3  # Fewer runs get no band: their curves are drawn thin.
LEGEND_ROWS = 16  # Legend entries per column.
LEGEND_STYLE = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, "frameon": False}
LEGEND_STYLE.update(fontsize="small", title_fontsize="small")


@dataclasses.dataclass
class Run:
    path: str
    overrides: dict[str, str]
    config: dict[str, Any]
    choices: dict[str, Any]
    summary: dict[str, Any] | None
    source: str | None = dataclasses.field(default=None, compare=False)  # The directory it was found under.

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    @property
    def task(self) -> str:
        """The environment the run trained on, as summary.json names it (`CartPole-v1`)."""
        summary = self.summary or {}
        return str(summary.get("environment") or self.setting("environment.name") or "unknown environment")

    def setting(self, key: str) -> str | None:
        """`key`'s value as a string: an override, a group's option (`agent`), a dotted config key or `dir`."""
        if key in self.overrides:
            return self.overrides[key]
        if key == "dir":  # The directory the run was found under, as given.
            return self.source
        if self.choices.get(key) is not None:
            return str(self.choices[key])
        node: Any = self.config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None and key in SUMMARY_SETTINGS and (self.summary or {}).get(key) is not None:
            return str(self.summary[key])
        return None if node is None or isinstance(node, (Mapping, list)) else str(node)

    def curve(self, metric: str = DEFAULT_METRIC) -> tuple[np.ndarray, np.ndarray]:
        """Actor steps and values of `metric` ("<label>/<column>" of `logs/<label>.csv`), sorted by steps."""
        label, column = metric.split("/", 1) if "/" in metric else ("evaluator", metric)
        path = os.path.join(self.path, "logs", f"{label}.csv")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist (metric {metric})")
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            if not {column, "actor_steps"} <= set(reader.fieldnames or []):
                raise KeyError(f"{path} has no column '{column}' (columns: {', '.join(reader.fieldnames or [])})")
            points = []
            for row in reader:
                with contextlib.suppress(TypeError, ValueError):  # A row without this value: left out.
                    points.append((float(row["actor_steps"]), float(row[column])))
        points = np.array(sorted(points, key=lambda point: point[0]), np.float64).reshape(-1, 2)  # Stable.
        return points[:, 0], points[:, 1]

    def final(self, metric: str = DEFAULT_METRIC) -> float:
        """The last value of `metric`: for the evaluator's return, the final evaluation."""
        if metric == DEFAULT_METRIC and self.summary and "final_eval_return" in self.summary:
            return float(self.summary["final_eval_return"])
        _, values = self.curve(metric)
        return float(values[-1]) if values.size else float("nan")

    def score(self, name: str = "final_eval_return") -> float:
        """The run's score `name` (one of SCORES) from summary.json, else its last evaluation.
        KeyError when the run has no such score."""
        if name == "objective":
            name = str(self.config.get("objective") or "final_eval_return")
        if self.summary and self.summary.get(name) is not None:
            return float(self.summary[name])
        if name == "final_eval_return" and os.path.exists(os.path.join(self.path, "logs", "evaluator.csv")):
            return self.final()
        raise KeyError(f"{os.path.join(self.path, 'summary.json')} has no {name}")


def _read(path: str, load: Any = yaml.safe_load) -> Any:
    if not os.path.exists(path):
        return None
    with open(path) as file:
        return load(file)


def is_run_directory(path: str) -> bool:
    """Whether `path` holds a run: Hydra's record of one, its logs or its summary."""
    records = (os.path.join(path, ".hydra", "config.yaml"), os.path.join(path, "summary.json"))
    return any(map(os.path.isfile, records)) or bool(glob.glob(os.path.join(path, "logs", "*.csv")))


def load_run(path: str, source: str | None = None) -> Run:
    hydra = _read(os.path.join(path, ".hydra", "hydra.yaml")) or {}
    choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    lines = [str(line).partition("=") for line in _read(os.path.join(path, ".hydra", "overrides.yaml")) or []]
    overrides = {key.lstrip("+~"): value for key, separator, value in lines if separator}
    summary = _read(os.path.join(path, "summary.json"), json.load)
    config = _read(os.path.join(path, ".hydra", "config.yaml")) or {}
    return Run(os.path.abspath(path), overrides, config, dict(choices), summary, source)


def find_runs(paths: Sequence[str]) -> list[Run]:
    """Every run in or under `paths`, in path order (a many-seed run: its replicas)."""
    found: dict[str, str] = {}
    for path in paths:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path} is not a directory")
        for root, directories, _ in os.walk(path):
            directories[:] = sorted(d for d in directories if not d.startswith(".") and d not in RUN_PARTS)
            if is_run_directory(root):
                found.setdefault(os.path.abspath(root), path)
                directories[:] = []
    runs = []
    for path, source in sorted(found.items(), key=lambda item: _natural_key(item[0])):
        run = load_run(path, source)
        names = [os.path.join(path, name) for name in os.listdir(path) if re.fullmatch(r"seed_\d+", name)]
        replicas = []
        for replica in [load_run(p, source) for p in sorted(names, key=_natural_key) if is_run_directory(p)]:
            seed = (replica.summary or {}).get("seed")
            overrides = dict(run.overrides)
            config = dict(run.config)
            if seed is not None:
                overrides["seed"] = str(seed)
                config["seed"] = seed
            replicas.append(dataclasses.replace(replica, overrides=overrides, config=config, choices=run.choices))
        runs += replicas or [run]
    return runs


def _natural_key(path: str) -> list[Any]:
    """Sorts sweep job directories 0, 1, 2, ..., 10 rather than 0, 1, 10, 2."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def varying_keys(runs: Sequence[Run], exclude: Sequence[str] = ()) -> list[str]:
    """Override keys whose values differ between runs, seeds, plumbing and top-level names in `exclude` left out."""
    ignored = (*IGNORED_HUE_KEYS, *exclude)
    keys = dict.fromkeys(key for run in runs for key in run.overrides if re.split(r"[./]", key)[0] not in ignored)
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


def group_runs(
    runs: Sequence[Run], hue: str | Sequence[str] | None = None, exclude: Sequence[str] = ()
) -> dict[str, list[Run]]:
    """Runs grouped by `hue`'s values (keys, comma-separated in a string); no hue: varying_keys(runs, exclude)."""
    if hue is None:
        keys = varying_keys(runs, exclude)
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
    return dict(sorted(groups.items(), key=lambda item: _sort_value(item[0])))


def aggregate_curve(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], statistic: Callable = np.mean, reps: int = DEFAULT_REPS
) -> dict[str, np.ndarray]:
    """`statistic(values, axis=0)` of (steps, values) curves at the steps all cover, its 95% band ("low", "high";
    rliable's stratified bootstrap, each point a stratum; none under 2 runs or reps) and the "runs"."""
    curves = [(steps, values) for steps, values in curves if steps.size]
    if not curves:
        return {**dict.fromkeys(("steps", "value", "low", "high"), np.zeros(0)), "runs": np.zeros((0, 0))}
    start = max(steps[0] for steps, _ in curves)
    stop = min(steps[-1] for steps, _ in curves)
    if stop < start:
        start = min(s[0] for s, _ in curves)
        stop = max(s[-1] for s, _ in curves)
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= start) & (grid <= stop)]
    grid = np.linspace(start, stop, MAX_CURVE_POINTS) if grid.size > MAX_CURVE_POINTS else grid
    values = np.stack([np.interp(grid, steps, curve) for steps, curve in curves])
    value = low = high = statistic(values, axis=0)
    if len(curves) > 1 and reps > 0:
        _, intervals = estimates({"curve": values}, lambda scores: statistic(scores, axis=0), reps)
        low, high = intervals["curve"]
    return {"steps": grid, "value": value, "low": low, "high": high, "runs": values}


def plot_curves(
    groups: Mapping[str, Sequence[Run]],
    metric: str = DEFAULT_METRIC,
    hue: str | None = None,
    title: str | None = None,
    reps: int = DEFAULT_REPS,
) -> Any:
    """Each group's mean curve against actor steps, with its 95% bootstrap band (save with bbox_inches="tight")."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    labels = [f"{label} (n={len(runs)})" for label, runs in groups.items()]
    columns = 1 + (len(labels) - 1) // LEGEND_ROWS
    width = 7.5 + 0.065 * columns * max((len(label) for label in labels), default=0)
    figure = Figure(figsize=(min(width, 24.0), 4.5), dpi=150, layout="constrained")
    ax = figure.add_subplot()
    for index, (runs, label) in enumerate(zip(groups.values(), labels)):
        curve = aggregate_curve([run.curve(metric) for run in runs], reps=reps if len(runs) >= MIN_BAND_RUNS else 0)
        color = f"C{index % 10}"
        marker = "o" if curve["steps"].size <= 25 else None  # Sparse evaluations: show the points.
        ax.plot(curve["steps"], curve["value"], color=color, linewidth=2, marker=marker, markersize=4, label=label)
        ax.fill_between(curve["steps"], curve["low"], curve["high"], color=color, alpha=0.2, linewidth=0)
        for values in curve["runs"] if len(runs) < MIN_BAND_RUNS else []:
            ax.plot(curve["steps"], values, color=color, linewidth=0.8, alpha=0.4)
    ax.set(xlabel="actor steps", ylabel=metric)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or metric, wrap=True)
    legend = f"{hue or 'runs'}\nline: the mean over a group's runs, band: its 95% bootstrap CI"
    legend += f"\nno band under {MIN_BAND_RUNS} runs (too few for a bootstrap): thin lines, the runs"
    if groups:  # Beside the axes, the title's lines left-aligned with the entries.
        ax.legend(title=legend, ncols=columns, **LEGEND_STYLE).set_alignment("left")
    return figure


def final_table(
    groups: Mapping[str, Sequence[Run]], metric: str = DEFAULT_METRIC, reps: int = DEFAULT_REPS
) -> list[dict[str, Any]]:
    """One row per group: the final values of `metric` summarised over its runs."""
    return [{"group": label, **summarize([run.final(metric) for run in runs], reps)} for label, runs in groups.items()]


def format_table(rows: Sequence[Mapping[str, Any]], hue: str | None = None, metric: str = DEFAULT_METRIC) -> str:
    """Group, runs, mean [95% CI], IQM [95% CI] per row of final_table (`-`: under MIN_BAND_RUNS runs)."""

    def cells(row: Mapping[str, Any], name: str) -> list[str]:
        band = "-" if row["runs"] < MIN_BAND_RUNS else f"[{row[name + '_low']:.1f}, {row[name + '_high']:.1f}]"
        return [f"{row[name]:.1f}", band]

    header = [hue or "group", "runs", "mean", "95% CI", "IQM", "IQM 95% CI"]
    body = [[str(row["group"]), str(row["runs"]), *cells(row, "mean"), *cells(row, "iqm")] for row in rows]
    lines = [f"final {metric} per group", *text_table(header, body)]
    if any(row["runs"] < MIN_BAND_RUNS for row in rows):
        lines.append(f"CI: 95% percentile bootstrap over runs; - : fewer than {MIN_BAND_RUNS} runs, too few for one")
    return "\n".join(lines)
