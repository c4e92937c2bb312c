"""Finding runs on disk and reading their settings and logged curves.

A run directory is what scripts/train.py leaves: `.hydra/` (config.yaml, hydra.yaml,
overrides.yaml), `logs/<label>.csv` and `summary.json`. A directory without `.hydra/`
(copied without it, or written by another tool) is still a run when it has `logs/*.csv`
or `summary.json`: its settings are then what summary.json says (agent, environment,
seed). A sweep (multirun) directory holds one run directory per job, however deeply
nested.

A run that trained several seeds side by side (launcher=anakin, `launcher.num_seeds`)
keeps each replica in `seed_<i>/` (logs, summary.json) and their mean in its own logs;
it is read as its replicas, each with the run's settings and its own seed, so the seeds
of one run are plotted as seeds, like the jobs of a sweep.
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import math
import os
import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import yaml

STEP_KEY = "actor_steps"
DEFAULT_METRIC = "evaluator/episode_return"
# Overrides that never name a group of runs: seeds vary within a group, the rest is plumbing.
IGNORED_HUE_KEYS = ("seed", "hydra", "progress", "checkpoint", "logger")
# summary.json fields that stand in for settings when a run has no .hydra/ directory.
SUMMARY_SETTINGS = ("agent", "environment", "seed")
# Values in group labels are shown to this many significant figures.
LABEL_SIGNIFICANT_FIGURES = 3


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
        """The value of `key` for this run, as a string: an override on its command line,
        a config group's option (`agent`, `environment`) or a config value (dotted key)."""
        if key in self.overrides:
            return self.overrides[key]
        if key in self.choices and self.choices[key] is not None:
            return str(self.choices[key])
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                node = None
                break
            node = node[part]
        if node is None and key in SUMMARY_SETTINGS and self.summary and self.summary.get(key) is not None:
            return str(self.summary[key])  # A run without .hydra/: what its summary says.
        return None if node is None or isinstance(node, (Mapping, list)) else str(node)

    def curve(self, metric: str = DEFAULT_METRIC) -> tuple[np.ndarray, np.ndarray]:
        """Actor steps and values of `metric` ("<label>/<column>", e.g. evaluator/episode_return)."""
        return read_curve(self.path, metric)

    def final(self, metric: str = DEFAULT_METRIC) -> float:
        """The last value of `metric`: for the evaluator's return, the final evaluation."""
        if metric == DEFAULT_METRIC and self.summary and "final_eval_return" in self.summary:
            return float(self.summary["final_eval_return"])
        _, values = self.curve(metric)
        return float(values[-1]) if values.size else float("nan")


def parse_overrides(lines: Iterable[str]) -> dict[str, str]:
    """`["agent.learning_rate=1e-3", "+x=1", "seed=0"]` -> {"agent.learning_rate": "1e-3", ...}."""
    overrides: dict[str, str] = {}
    for line in lines:
        key, separator, value = str(line).partition("=")
        if not separator:
            continue
        overrides[key.lstrip("+~")] = value
    return overrides


def _read_yaml(path: str) -> Any:
    if not os.path.exists(path):
        return None
    with open(path) as file:
        return yaml.safe_load(file)


def is_run_directory(path: str) -> bool:
    """Whether `path` holds a run: Hydra's record of one, its logs or its summary."""
    return (
        os.path.isfile(os.path.join(path, ".hydra", "config.yaml"))
        or os.path.isfile(os.path.join(path, "summary.json"))
        or bool(glob.glob(os.path.join(path, "logs", "*.csv")))
    )


def load_run(path: str) -> Run:
    hydra_dir = os.path.join(path, ".hydra")
    hydra = _read_yaml(os.path.join(hydra_dir, "hydra.yaml")) or {}
    choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    summary_path = os.path.join(path, "summary.json")
    summary = None
    if os.path.exists(summary_path):
        with open(summary_path) as file:
            summary = json.load(file)
    return Run(
        path=os.path.abspath(path),
        overrides=parse_overrides(_read_yaml(os.path.join(hydra_dir, "overrides.yaml")) or []),
        config=_read_yaml(os.path.join(hydra_dir, "config.yaml")) or {},
        choices=dict(choices),
        summary=summary,
    )


REPLICA_DIRECTORY = re.compile(r"^seed_\d+$")


def replica_directories(path: str) -> list[str]:
    """The replicas of a many-seed run (`seed_<i>/` run directories), in seed order."""
    if not os.path.isdir(path):
        return []
    names = [name for name in os.listdir(path) if REPLICA_DIRECTORY.match(name)]
    found = [os.path.join(path, name) for name in names if is_run_directory(os.path.join(path, name))]
    return sorted(found, key=_natural_key)


def load_replica(parent: Run, path: str) -> Run:
    """Replica `path` of run `parent`: the parent's settings, the replica's own seed (from
    its summary.json) and summary."""
    replica = load_run(path)
    seed = (replica.summary or {}).get("seed")
    overrides, config = dict(parent.overrides), dict(parent.config)
    if seed is not None:
        overrides["seed"] = str(seed)
        config["seed"] = seed
    return dataclasses.replace(replica, overrides=overrides, config=config, choices=dict(parent.choices))


def _load(path: str) -> list[Run]:
    """The run at `path`, or its replicas when it trained several seeds."""
    run = load_run(path)
    replicas = replica_directories(path)
    return [load_replica(run, replica) for replica in replicas] if replicas else [run]


def find_runs(paths: Sequence[str]) -> list[Run]:
    """Every run directory in or under `paths` (run or sweep directories), in path order;
    a many-seed run counts as its replicas (module docstring)."""
    found: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path} is not a directory")
        if is_run_directory(path):
            found.append(path)
            continue
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


def split_metric(metric: str) -> tuple[str, str]:
    label, _, column = metric.partition("/")
    if not column:
        return "evaluator", label
    return label, column


def read_curve(run_path: str, metric: str = DEFAULT_METRIC) -> tuple[np.ndarray, np.ndarray]:
    """Reads `logs/<label>.csv` of a run; rows without the metric are skipped."""
    label, column = split_metric(metric)
    path = os.path.join(run_path, "logs", f"{label}.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist (metric {metric})")
    steps, values = [], []
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        if column not in (reader.fieldnames or []) or STEP_KEY not in (reader.fieldnames or []):
            raise KeyError(f"{path} has no column '{column}' (columns: {', '.join(reader.fieldnames or [])})")
        for row in reader:
            try:
                steps.append(float(row[STEP_KEY]))
                values.append(float(row[column]))
            except (TypeError, ValueError):
                continue
    order = np.argsort(np.asarray(steps), kind="stable")
    return np.asarray(steps)[order], np.asarray(values, dtype=np.float64)[order]


def varying_keys(runs: Sequence[Run]) -> list[str]:
    """Override keys whose values differ between runs, seeds and plumbing excluded."""
    keys: list[str] = []
    for run in runs:
        for key in run.overrides:
            if key not in keys and key.split(".")[0].split("/")[0] not in IGNORED_HUE_KEYS:
                keys.append(key)
    return [key for key in keys if len({run.setting(key) for run in runs}) > 1]


def short_value(value: str | None) -> str:
    """A setting as a label shows it: numbers written with more than 3 significant
    figures are rounded to 3 (0.000123456789 -> 0.000123, 3.14159 -> 3.14); integers,
    numbers already short (1e-3, 0.25) and other strings are left as they are."""
    if value is None:
        return "None"
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number) or re.fullmatch(r"[+-]?\d+", text):
        return text
    mantissa = re.split(r"[eE]", text)[0].lstrip("+-").replace(".", "").lstrip("0")
    if len(mantissa.rstrip("0")) <= LABEL_SIGNIFICANT_FIGURES:
        return text
    return f"{number:.{LABEL_SIGNIFICANT_FIGURES}g}"


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key's shortest trailing part that no other key ends with
    (`agent.learning_rate` -> `learning_rate`)."""
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
    """Runs grouped by the value of `hue` (an override or config key; several keys give
    "k1=v1, k2=v2" labels, each key by its last distinct part). With no hue, by every
    override that varies except the seed. Numbers in labels are rounded to 3
    significant figures (`short_value`)."""
    if hue is None:
        keys = varying_keys(runs)
    elif isinstance(hue, str):
        keys = [key.strip() for key in hue.split(",") if key.strip()]
    else:
        keys = list(hue)
    names = short_keys(keys)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if not keys:
            label = "all runs"
        elif len(keys) == 1:
            label = short_value(run.setting(keys[0]))
        else:
            label = ", ".join(f"{names[key]}={short_value(run.setting(key))}" for key in keys)
        groups.setdefault(label, []).append(run)
    if len(keys) == 1:
        return dict(sorted(groups.items(), key=lambda item: _sort_value(item[0])))
    return dict(sorted(groups.items()))
