"""scripts/train.py's runs as they lie on disk: which directories hold one (a single run, a many-seed run's
`seed_<i>/` replicas, every job of a sweep) and what each says (settings, curves, final values)."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob
import json
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

DEFAULT_METRIC = "evaluator/episode_return"
SUMMARY_SETTINGS = ("agent", "environment", "seed")  # summary.json's, for a run without .hydra/.
RUN_PARTS = ("wandb", "logs", "checkpoints")  # Hold no run of their own, nor do hidden ones (.hydra/, .grid/).


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
    """Whether `path` holds a run: Hydra's record of one, its logs or a run's summary. A sweep's own
    summary.json (hydra/sweeper=pbt writes one naming its best member) counts no actor steps, so the
    search goes on into the sweep's jobs."""
    if os.path.isfile(os.path.join(path, ".hydra", "config.yaml")) or glob.glob(os.path.join(path, "logs", "*.csv")):
        return True
    summary = _read(os.path.join(path, "summary.json"), json.load)
    return isinstance(summary, dict) and "actor_steps" in summary


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
