"""What a sweep found: its jobs grouped into settings (a job's overrides but its seed), each ranked by the
mean of the sweep's objective over its seeds. A setting that won on one lucky seed does not beat one that
wins on average; a sweep with one seed per setting ranks its jobs as before."""

from __future__ import annotations

import dataclasses
import shlex
import statistics
from typing import Any, Sequence

SEED_KEYS = ("seed", "+seed", "++seed")


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

    @property
    def command(self) -> str:
        """The command that runs this setting on the seeds it was swept on."""
        seeds = [seed_of(trial.overrides) for trial in self.trials]
        given = [seed for seed in seeds if seed is not None]
        seed = [f"seed={','.join(given)}"] if len(given) > 1 else [f"seed={given[0]}"] if given else []
        multirun = ["-m"] if len(given) > 1 else []
        return "python scripts/train.py " + " ".join(shlex.quote(o) for o in [*multirun, *self.overrides, *seed])

    def describe(self) -> dict[str, Any]:
        """The setting as results.yaml holds it."""
        return {
            "overrides": list(self.overrides),
            "mean": self.mean,
            "min": min(self.values),
            "max": max(self.values),
            "count": len(self.values),
            "jobs": {trial.job: trial.value for trial in self.trials},
            "command": self.command,
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


def best_line(settings: Sequence[Setting], scored: int) -> str:
    """The sweep's best, in one line: as a job where every setting ran once, else as a setting over seeds."""
    best = settings[0]
    if all(len(setting.trials) == 1 for setting in settings):
        (trial,) = best.trials
        command = "python scripts/train.py " + " ".join(shlex.quote(o) for o in trial.overrides)
        return f"Best of {scored} jobs: {trial.job} ({trial.value:.1f}): {command}"
    spread = f"min {min(best.values):.1f}, max {max(best.values):.1f}"
    return (
        f"Best of {len(settings)} settings ({scored} jobs): mean {best.mean:.1f} over {len(best.values)} seeds "
        f"({spread}): {best.command}"
    )
