"""What a sweep found: its jobs grouped into settings (a job's overrides but its seed), each ranked by the
mean of the sweep's objective over its seeds. A setting that won on one lucky seed does not beat one that
wins on average; a sweep with one seed per setting ranks its jobs as before."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import statistics
from typing import Any, Sequence

import yaml

SEED_KEYS = ("seed", "+seed", "++seed")
DEFAULT_PROGRAM = "python scripts/train.py"


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """How the printed commands start: the program as the user typed it (`rl-train`, `python -m rl.train` or
    `python scripts/train.py`) and the launcher overrides that shape a multirun (`hydra/launcher=anakin_grid`:
    the best setting's seeds run as the one program the sweep ran them in)."""

    program: str = DEFAULT_PROGRAM
    multirun_overrides: tuple[str, ...] = ()

    def single(self, overrides: Sequence[str]) -> str:
        return " ".join([self.program, *(shlex.quote(o) for o in overrides)])

    def multirun(self, overrides: Sequence[str]) -> str:
        return " ".join([self.program, "-m", *(shlex.quote(o) for o in [*self.multirun_overrides, *overrides])])


@dataclasses.dataclass(frozen=True)
class Trial:
    """One job of the sweep: its directory under the sweep (`job`), its overrides and objective value (None:
    not scored, e.g. failed or pruned)."""

    job: str
    overrides: tuple[str, ...]
    value: float | None


@dataclasses.dataclass(frozen=True)
class Setting:
    """The jobs of one setting, and their objective over seeds."""

    overrides: tuple[str, ...]  # Without the seed.
    trials: tuple[Trial, ...]  # Its scored jobs.

    @property
    def values(self) -> list[float]:
        return [trial.value for trial in self.trials if trial.value is not None]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    def command(self, command_line: CommandLine = CommandLine()) -> str:
        """The command that runs this setting on the seeds it was swept on."""
        seeds = [seed_of(trial.overrides) for trial in self.trials]
        given = [seed for seed in seeds if seed is not None]
        if len(given) > 1:
            return command_line.multirun([*self.overrides, f"seed={','.join(given)}"])
        seed = [f"seed={given[0]}"] if given else []
        return command_line.single([*self.overrides, *seed])

    def describe(self, command_line: CommandLine = CommandLine()) -> dict[str, Any]:
        """The setting as results.yaml holds it."""
        return {
            "overrides": list(self.overrides),
            "mean": self.mean,
            "min": min(self.values),
            "max": max(self.values),
            "count": len(self.values),
            "jobs": {trial.job: trial.value for trial in self.trials},
            "command": self.command(command_line),
        }


def _key(override: str) -> str:
    return override.split("=", 1)[0]


def seed_of(overrides: Sequence[str]) -> str | None:
    """The seed a job's overrides set (None: the default)."""
    seeds = [override.split("=", 1)[1] for override in overrides if _key(override) in SEED_KEYS]
    return seeds[-1] if seeds else None


def rank_settings(trials: Sequence[Trial], maximize: bool = True) -> list[Setting]:
    """The scored trials grouped by their overrides without the seed, best mean first (ties: first swept)."""
    groups: dict[tuple[str, ...], list[Trial]] = {}
    for trial in trials:
        if trial.value is not None:
            setting = tuple(override for override in trial.overrides if _key(override) not in SEED_KEYS)
            groups.setdefault(setting, []).append(trial)
    settings = [Setting(overrides, tuple(members)) for overrides, members in groups.items()]
    return sorted(settings, key=lambda setting: -setting.mean if maximize else setting.mean)


def best_line(
    settings: Sequence[Setting], scored: int, pruned: int = 0, command_line: CommandLine = CommandLine()
) -> str:
    """The sweep's best, in one line: as a job where every setting ran once, else as a setting over seeds.
    `pruned` jobs were stopped by the search and are left out."""
    best = settings[0]
    jobs = f"{scored} jobs" + (f", {pruned} pruned left out" if pruned else "")
    if all(len(setting.trials) == 1 for setting in settings):
        (trial,) = best.trials
        return f"Best of {jobs}: {trial.job} ({trial.value:.1f}): {command_line.single(trial.overrides)}"
    spread = f"min {min(best.values):.1f}, max {max(best.values):.1f}"
    return (
        f"Best of {len(settings)} settings ({jobs}): mean {best.mean:.1f} over {len(best.values)} seeds "
        f"({spread}): {best.command(command_line)}"
    )


@dataclasses.dataclass
class SweepJobs:
    """What a sweep's directory holds: each job that ran (`trials`, with its directory and status) and each
    job refused before it started (its directory under the sweep -> why)."""

    trials: list[dict[str, Any]]
    refused: dict[str, str]


def read_sweep(sweep: str, objective: str, refused_file: str) -> SweepJobs:
    """Every job under `sweep`: its summary.json's `objective` (None where not a finite number), status and
    overrides, in the order the sweep numbered them."""
    trials = []
    refused = {}
    for directory, _, names in os.walk(sweep):
        job = os.path.relpath(directory, sweep)
        if refused_file in names:
            with open(os.path.join(directory, refused_file)) as file:
                refused[job] = file.read().strip()
        overrides = os.path.join(directory, ".hydra", "overrides.yaml")
        if "summary.json" in names and os.path.isfile(overrides):
            with open(os.path.join(directory, "summary.json")) as file:
                summary = json.load(file)
            with open(overrides) as file:
                job_overrides = [str(line) for line in yaml.safe_load(file) or []]
            value = summary.get(objective)
            value = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
            trials.append({"job": job, "directory": directory, "overrides": job_overrides, "value": value})
            trials[-1]["status"] = summary.get("status")
    trials.sort(key=lambda trial: [int(p) if p.isdigit() else p for p in trial["job"].split(os.sep)])
    return SweepJobs(trials, dict(sorted(refused.items())))


def write_results(sweep: str, jobs: SweepJobs, maximize: bool, command_line: CommandLine = CommandLine()) -> list[str]:
    """`<sweep>/results.yaml` (the best setting, every setting ranked, every job, the refused ones) and the
    lines that report it, their commands begun as `command_line` says; none where no job was scored."""
    scored = [trial for trial in jobs.trials if trial["value"] is not None and trial["status"] != "pruned"]
    if not scored:
        return []
    settings = rank_settings([Trial(t["job"], tuple(t["overrides"]), t["value"]) for t in scored], maximize)
    best = settings[0].describe(command_line)
    if len(settings[0].trials) == 1 and all(len(setting.trials) == 1 for setting in settings):
        (trial,) = [t for t in scored if t["job"] == settings[0].trials[0].job]
        command = command_line.single(trial["overrides"])
        best = {**trial, "overrides": list(trial["overrides"]), "command": command}  # No YAML anchors.
    results = {
        "best": best,
        "settings": [setting.describe(command_line) for setting in settings],
        "trials": jobs.trials,
        "refused": jobs.refused,
    }
    path = os.path.join(sweep, "results.yaml")
    with open(path, "w") as file:
        yaml.safe_dump(results, file, sort_keys=False, width=1000)
    pruned = sum(trial["status"] == "pruned" for trial in jobs.trials)
    best = best_line(settings, len(scored), pruned, command_line)
    return [best, f"Every setting and job, with their values: {path}"]
