"""What a grid shows while it trains. A group's replicas may differ in their settings (its batched keys), so
their mean return is no setting's: each evaluation round prints one line per setting, its own return (the
mean over its seeds) and each of its jobs'. Here the group's replicas tell the lines as they evaluate
(`SettingsProgress`, a RunHook per replica); on another machine (engine=submitit) the same lines are read
back from the jobs' records in the shared sweep directory (`RecordsProgress`)."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import Any, Callable, Mapping, Sequence

from rl.anakin.build import value_of
from rl.experiments.hooks import RunHook

EVALUATOR_RECORD = os.path.join("logs", "evaluator.csv")  # A job's evaluation rounds, in its run directory.


@dataclasses.dataclass(frozen=True)
class GridSetting:
    """The replicas of a group that share a setting (they differ in their seed only): `label` names its batched
    values ("agent.learning_rate=0.001"; "" when the group batches seeds only), `jobs` the sweep's job numbers."""

    label: str
    replicas: tuple[int, ...]  # Their places in the group.
    jobs: tuple[int, ...]


def group_settings(labels: Sequence[str], jobs: Sequence[int]) -> list[GridSetting]:
    """The settings of a group whose replica i has setting `labels[i]` and job number `jobs[i]`, in order."""
    members: dict[str, list[int]] = {}
    for replica, label in enumerate(labels):
        members.setdefault(label, []).append(replica)
    return [GridSetting(label, tuple(rs), tuple(jobs[r] for r in rs)) for label, rs in members.items()]


def setting_label(values: Mapping[str, float]) -> str:
    """ "agent.learning_rate=0.001 agent.entropy_cost=0.01": a replica's batched values as the user set them."""
    return " ".join(f"{key}={value}" for key, value in values.items())


def settings_of_group(experiments: Sequence[Any], jobs: Sequence[int], batched: Sequence[str]) -> list[GridSetting]:
    """A group's settings: its replicas (`experiments`, the sweep's jobs `jobs`) by their values of `batched`."""
    labels = [setting_label({key: value_of(experiment, key) for key in batched}) for experiment in experiments]
    return group_settings(labels, jobs)


def setting_lines(steps: int, budget: int, settings: Sequence[GridSetting], returns: Mapping[int, float]) -> list[str]:
    """One line per setting of an evaluation round at `steps` of `budget` actor steps: the setting's mean return
    over its replicas that evaluated (`returns`: replica -> its return) and each job's. A setting none of whose
    replicas evaluated (failed, pruned) has no line."""
    lines = []
    for setting in settings:
        told = [(job, returns[replica]) for replica, job in zip(setting.replicas, setting.jobs) if replica in returns]
        if not told:
            continue
        finite = [value for _, value in told if math.isfinite(value)]
        mean = f"{sum(finite) / len(finite):.1f}" if finite else "nan"
        each = ", ".join(f"{value:.1f}" for _, value in told)
        jobs = ", ".join(str(job) for job, _ in told)
        who = f"job {jobs}" if len(told) == 1 else f"jobs {jobs}: {each}"
        name = f" {setting.label}" if setting.label else ""
        lines.append(f"{steps}/{budget} actor steps{name}: eval return {mean} ({who})")
    return lines


class SettingsProgress:
    """Collects a group's evaluation rounds from its replicas' hooks (`hook`) and says each round's `setting_lines`
    once every replica still training has told it: those that told the round before (a replica that failed or
    was pruned tells no more, so its absence is seen at the next round's first word, or at `flush`)."""

    def __init__(self, settings: Sequence[GridSetting], budget: int, say: Callable[[str], None]):
        self.settings = list(settings)
        self.budget = budget
        self.say = say
        self.expected = {replica for setting in self.settings for replica in setting.replicas}
        self.steps: int | None = None  # The round being told.
        self.returns: dict[int, float] = {}

    def hook(self, replica: int) -> RunHook:
        return _Teller(self, replica)

    def told(self, replica: int, steps: int, value: float) -> None:
        if self.steps is not None and steps != self.steps:
            self.flush()
        self.steps = steps
        self.returns[replica] = value
        if set(self.returns) >= self.expected:
            self.flush()

    def flush(self) -> None:
        """Says the round told so far (nothing when none is pending)."""
        if self.steps is None:
            return
        for line in setting_lines(self.steps, self.budget, self.settings, self.returns):
            self.say(line)
        self.expected = set(self.returns)
        self.steps = None
        self.returns = {}


class _Teller(RunHook):
    """A replica's hook: tells its evaluation rounds to the group's SettingsProgress; never ends the run."""

    def __init__(self, progress: SettingsProgress, replica: int):
        self.progress = progress
        self.replica = replica

    def after_evaluation(self, actor_steps: int, mean_return: float) -> bool:
        self.progress.told(self.replica, actor_steps, mean_return)
        return False


def evaluations(run_directory: str) -> list[tuple[int, float]]:
    """(actor steps, return) of each complete row of a job's evaluator.csv (none yet: []); a row being written
    (cut short) is skipped."""
    path = os.path.join(run_directory, EVALUATOR_RECORD)
    if not os.path.isfile(path):
        return []
    rounds = []
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            try:
                rounds.append((int(float(row["actor_steps"])), float(row["episode_return"])))
            except (KeyError, TypeError, ValueError):
                continue
    return rounds


class RecordsProgress:
    """A group trained elsewhere, watched through its jobs' records (`directories[i]`: replica i's run directory):
    `new_lines` gives the `setting_lines` of its latest evaluation round once, when every replica still training
    has written it (the jobs write a round one after another: a replica at the round before is waited for, one
    further behind has stopped, failed or pruned), or whatever is latest once the group is `done`."""

    def __init__(self, settings: Sequence[GridSetting], budget: int, directories: Sequence[str]):
        self.settings = list(settings)
        self.budget = budget
        self.directories = list(directories)
        self.shown = 0  # The last round said (actor steps).
        self.training = set(range(len(self.directories)))  # The replicas that wrote the last round said.

    def new_lines(self, done: bool = False) -> list[str]:
        records = [evaluations(directory) for directory in self.directories]
        last = [rows[-1] if rows else (0, math.nan) for rows in records]
        steps = max(at for at, _ in last)
        if steps <= self.shown:
            return []
        rounds = {0} | {at for rows in records for at, _ in rows}
        previous = max(at for at in rounds if at < steps)
        waiting = any(last[replica][0] == previous for replica in self.training)
        if waiting and not done:
            return []
        returns = {replica: value for replica, (at, value) in enumerate(last) if at == steps}
        self.shown = steps
        self.training = set(returns)
        return setting_lines(steps, self.budget, self.settings, returns)
