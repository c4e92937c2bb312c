"""Finding scripts/train.py's run directories (however deeply nested in a sweep; a many-seed
run as its `seed_<i>/` replicas), reading their settings, curves and scores, and grouping them."""

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
# Overrides that never name a group of runs.
IGNORED_HUE_KEYS = ("seed", "hydra", "progress", "checkpoint", "logger")
# summary.json fields that stand in for settings when a run has no .hydra/ directory.
SUMMARY_SETTINGS = ("agent", "environment", "seed")
# A pseudo setting: the directory a run was found under, as given on the command line.
DIRECTORY_KEY = "dir"
# What a run can be scored by: summary.json's return statistics, or "objective", the one the
# run's config named (what a sweeper saw).
SCORES = ("final_eval_return", "last_evals_mean", "eval_return_auc", "objective")


@dataclasses.dataclass
class Run:
    path: str
    overrides: dict[str, str]
    config: dict[str, Any]
    choices: dict[str, Any]
    summary: dict[str, Any] | None
    # Where find_runs found it, not what it is (left out of ==): the directory it was given, and
    # whether that directory is a sweep holding runs rather than this run itself.
    source: str | None = dataclasses.field(default=None, compare=False)
    in_sweep: bool = dataclasses.field(default=False, compare=False)

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    @property
    def task(self) -> str:
        """The environment the run trained on, as summary.json names it (`CartPole-v1`)."""
        if (self.summary or {}).get("environment"):
            return str(self.summary["environment"])
        environment = self.config.get("environment") if isinstance(self.config.get("environment"), Mapping) else {}
        return str(environment.get("name") or self.choices.get("environment") or "unknown environment")

    def setting(self, key: str) -> str | None:
        """`key`'s value as a string: an override, a group's option (`agent`) or a dotted config key
        (`dir`: the directory the run was found under)."""
        if key in self.overrides:
            return self.overrides[key]
        if key == DIRECTORY_KEY:
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

    def score(self, name: str = "final_eval_return") -> float:
        """The run's score `name` (one of SCORES) from summary.json; a run without a summary scores
        its last evaluation. KeyError when the run has no such score."""
        if name == "objective":
            name = str(self.config.get("objective") or "final_eval_return")
        if self.summary and self.summary.get(name) is not None:
            return float(self.summary[name])
        if name == "final_eval_return":
            try:
                return self.final(DEFAULT_METRIC)
            except (FileNotFoundError, KeyError):
                pass
        raise KeyError(f"{os.path.join(self.path, 'summary.json')} has no {name}")


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
    """Every run in or under `paths`, in path order (a many-seed run: its replicas), each
    remembering the path it was found under."""
    found: dict[str, tuple[str, bool]] = {}
    for path in paths:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path} is not a directory")
        in_sweep = not is_run_directory(path)
        for root, directories, _ in os.walk(path):
            directories[:] = sorted(d for d in directories if d not in (".hydra", "wandb", "logs", "checkpoints"))
            if is_run_directory(root):
                found.setdefault(os.path.abspath(root), (path, in_sweep))
                directories[:] = []
    runs = []
    for path in sorted(found, key=_natural_key):
        source, in_sweep = found[path]
        run = dataclasses.replace(load_run(path), source=source, in_sweep=in_sweep)
        names = [os.path.join(path, name) for name in os.listdir(path) if re.fullmatch(r"seed_\d+", name)]
        replicas = []
        for replica in [load_run(p) for p in sorted(names, key=_natural_key) if is_run_directory(p)]:
            seed = (replica.summary or {}).get("seed")
            overrides, config = dict(run.overrides), dict(run.config)
            if seed is not None:
                overrides["seed"], config["seed"] = str(seed), seed
            replicas.append(
                dataclasses.replace(
                    replica,
                    overrides=overrides,
                    config=config,
                    choices=dict(run.choices),
                    source=source,
                    in_sweep=in_sweep,
                )
            )
        runs += replicas or [run]
    return runs


def _natural_key(path: str) -> list[Any]:
    """Sorts sweep job directories 0, 1, 2, ..., 10 rather than 0, 1, 10, 2."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def varying_keys(runs: Sequence[Run], exclude: Sequence[str] = ()) -> list[str]:
    """Override keys whose values differ between runs; seeds, plumbing and keys under `exclude`
    (top-level names such as `environment`) left out."""
    ignored = (*IGNORED_HUE_KEYS, *exclude)
    keys = dict.fromkeys(key for run in runs for key in run.overrides)
    keys = [key for key in keys if key.split(".")[0].split("/")[0] not in ignored]
    return [key for key in keys if len({run.setting(key) for run in runs}) > 1]


def default_keys(runs: Sequence[Run], exclude: Sequence[str] = ()) -> list[str]:
    """What groups runs when nothing is asked: every override that varies but the seed and
    `exclude`, and the sweep directory too wherever those alone would pool two sweeps' runs
    (two sweeps of the same grid, before and after a change, stay apart)."""
    keys = varying_keys(runs, exclude)
    sources: dict[tuple, set[str]] = {}
    for run in runs:
        if run.in_sweep:
            sources.setdefault(tuple(run.setting(key) for key in keys), set()).add(str(run.source))
    if any(len(found) > 1 for found in sources.values()):
        keys = [DIRECTORY_KEY, *keys]
    return keys


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


def hue_keys(hue: str | Sequence[str] | None) -> list[str] | None:
    """`--hue`'s keys (comma-separated in a string); None stays None (the default grouping)."""
    if hue is None:
        return None
    return [key.strip() for key in hue.split(",") if key.strip()] if isinstance(hue, str) else list(hue)


def group_runs(
    runs: Sequence[Run], hue: str | Sequence[str] | None = None, exclude: Sequence[str] = ()
) -> dict[str, list[Run]]:
    """Runs grouped by `hue`'s values (override or config keys, `dir`); no hue: default_keys."""
    keys = hue_keys(hue)
    if keys is None:
        keys = default_keys(runs, exclude)
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
