"""Finding runs (scripts/train.py's directories: `.hydra/`, `logs/<label>.csv`, `summary.json`),
however deeply nested in sweeps, and reading their settings and curves. A many-seed run
(launcher=anakin) is read as its `seed_<i>/` replicas, each with the run's settings and its seed."""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import math
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

DEFAULT_METRIC = "evaluator/episode_return"
# Overrides that never name a group of runs: seeds vary within a group, the rest is plumbing.
IGNORED_HUE_KEYS = ("seed", "hydra", "progress", "checkpoint", "logger")
# summary.json fields that stand in for settings when a run has no .hydra/ directory.
SUMMARY_SETTINGS = ("agent", "environment", "seed")


@dataclasses.dataclass
class Run:
    """One training run: where it is, how it was configured and what it returned."""

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
            return str(self.summary[key])  # A run without .hydra/: what its summary says.
        return None if node is None or isinstance(node, (Mapping, list)) else str(node)

    def curve(self, metric: str = DEFAULT_METRIC) -> tuple[np.ndarray, np.ndarray]:
        """Actor steps and values of `metric` ("<label>/<column>" of `logs/<label>.csv`, a bare column
        the evaluator's), sorted by steps; rows without the metric skipped."""
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


def _load(path: str) -> list[Run]:
    """The run at `path`, or its `seed_<i>/` replicas in seed order (module docstring)."""
    run = load_run(path)
    names = [name for name in os.listdir(path) if re.fullmatch(r"seed_\d+", name)]
    replicas = []
    for replica_path in sorted((os.path.join(path, name) for name in names), key=_natural_key):
        if is_run_directory(replica_path):
            replica = load_run(replica_path)
            seed = (replica.summary or {}).get("seed")
            overrides, config = dict(run.overrides), dict(run.config)
            if seed is not None:
                overrides["seed"], config["seed"] = str(seed), seed
            replicas.append(dataclasses.replace(replica, overrides=overrides, config=config, choices=dict(run.choices)))
    return replicas or [run]


def find_runs(paths: Sequence[str]) -> list[Run]:
    """Every run in or under `paths`, in path order (a many-seed run: its replicas)."""
    found: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path} is not a directory")
        for root, directories, _ in os.walk(path):
            directories[:] = sorted(d for d in directories if d not in (".hydra", "wandb", "logs", "checkpoints"))
            if is_run_directory(root):
                found.append(root)
                directories[:] = []
    unique = sorted(set(os.path.abspath(p) for p in found), key=_natural_key)
    return [run for path in unique for run in _load(path)]


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
    """Runs grouped by `hue`'s value (an override or config key; several give "k1=v1, k2=v2" labels
    by `short_keys`); no hue: every override that varies but the seed."""
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
