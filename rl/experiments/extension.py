"""Extending a run: resuming it (`resume=DIR`, or its command again) with a larger `max_actor_steps` continues
it to the new budget, finished or not. The settings its saved configuration derives from `max_actor_steps`
(the learning-rate decay horizon, the exploration schedule's `run_steps`: whatever interpolates it) then keep
their horizon (`extend=keep`: the schedules have run their course and stay where they ended, a learning rate
decayed to 0 included) or stretch to the new budget (`extend=stretch`: as if the run had been planned that
long, so a decayed learning rate or epsilon rises again). Neither suits every run, so there is no default:
an extension with such settings and no `extend` is refused in one line naming both. Under a launcher whose
replay buffer is part of the learner state (anakin, sebulba), the buffer keeps its size either way: it is
restored as it was saved. Found and checked before anything starts; written by `record`."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from rl import checkpointing
from rl.checkpointing import SUMMARY_FILE, CheckpointError
from rl.experiments.launcher import Launcher
from rl.experiments.saved_config import read_saved_config
from rl.experiments.validation import ConfigError

CHOICES = ("keep", "stretch")
BUDGET_KEY = "max_actor_steps"


@dataclasses.dataclass(frozen=True)
class Extension:
    """A run's budget raised from `before` to `after` actor steps; `horizon` holds the settings derived from
    the budget as the run had them, `stretched` the same settings at the new budget, `fixed` the settings
    pinned whatever the choice (a replay buffer in the learner state keeps its size)."""

    run_directory: str
    before: int
    after: int
    choice: str  # "keep" or "stretch"; "keep" when no setting follows the budget.
    horizon: dict[str, Any]
    stretched: dict[str, Any]
    fixed: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def schedule(self) -> dict[str, Any]:
        """The derived settings the extended run uses."""
        chosen = self.horizon if self.choice == "keep" else self.stretched
        return {**chosen, **self.fixed}

    @property
    def pinned(self) -> dict[str, Any]:
        """The settings the run's own config takes as values (no longer following max_actor_steps)."""
        kept = self.horizon if self.choice == "keep" else {}
        return {**kept, **self.fixed}

    def describe(self) -> str:
        """The one line the run prints: the new budget, what its schedules do and its buffer's size if kept."""
        start = f"Extending the run in {self.run_directory} from {self.before} to {self.after} actor steps"
        if not self.horizon:
            schedules = "no setting follows max_actor_steps"
        elif self.choice == "keep":
            kept = ", ".join(f"{key}={value}" for key, value in self.horizon.items())
            schedules = f"its schedules keep their horizon ({kept}; extend=stretch stretches them)"
        else:
            changes = ", ".join(f"{key} {self.horizon[key]} -> {self.stretched[key]}" for key in self.horizon)
            schedules = f"its schedules stretch ({changes}; extend=keep keeps them)"
        fixed = ", ".join(f"{key}={value}" for key, value in self.fixed.items())
        return f"{start}; {schedules}" + (f"; its replay buffer keeps its size ({fixed})" if fixed else "")


def check_choice(config: Any) -> str | None:
    """The config's `extend` (None: not chosen), refused in one line unless it is one of `CHOICES`."""
    choice = config.get("extend")
    if choice is not None and choice not in CHOICES:
        raise ConfigError(
            "extend",
            f"is {choice!r}; a resumed run given a larger max_actor_steps either keeps its schedules' horizon "
            "(extend=keep) or stretches them to the new budget (extend=stretch)",
        )
    return choice


def derived_settings(saved: DictConfig, budget: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings of `saved` that change when its `max_actor_steps` becomes `budget`: their values in
    `saved` and at `budget` (resolving the config both ways finds every interpolation, however nested)."""
    resized = saved.copy()
    OmegaConf.update(resized, BUDGET_KEY, budget, merge=False)
    before = checkpointing.flatten_mapping(resolved(saved))
    after = checkpointing.flatten_mapping(resolved(resized))
    keys = [key for key in before if key != BUDGET_KEY and after.get(key) != before[key]]
    return {key: before[key] for key in keys}, {key: after[key] for key in keys}


def replay_sized_by_budget(launcher_target: Any) -> bool:
    """Whether the launcher named by `launcher_target` keeps the replay buffer in the learner state, sized by
    the budget (`Launcher.replay_sized_by_budget`); an unknown target is make_experiment's to refuse."""
    module, _, name = str(launcher_target or "").rpartition(".")
    try:
        launcher = getattr(importlib.import_module(module), name)  # The class a `_target_` names.
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(launcher, type) and issubclass(launcher, Launcher) and launcher.replay_sized_by_budget


def kept_replay_size(saved: dict[str, Any], launcher_target: Any, before: int) -> dict[str, Any]:
    """`agent.max_replay_size` pinned to the run's budget where the buffer in the learner state was sized by that
    budget (min(agent.max_replay_size, max_actor_steps)): the checkpoint's buffer is restored at its size.
    `saved`: the run's resolved config; `launcher_target`: the launcher resuming it."""
    size = (saved.get("agent") or {}).get("max_replay_size")
    if size is None or size <= before or not replay_sized_by_budget(launcher_target):
        return {}
    return {"agent.max_replay_size": before}


def resolved(config: DictConfig) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(config, resolve=True)
    except Exception as error:  # noqa: BLE001 - an unresolvable saved config: say so.
        raise CheckpointError(f"cannot resolve the run's saved configuration ({error})") from None


def find_extension(config: Any, run_directory: str) -> Extension | None:
    """The extension `config` asks of the run in `run_directory`: None when the directory holds no run or the
    budget is the run's own; a smaller budget is refused (a run is extended, never shortened)."""
    choice = check_choice(config)
    run_directory = os.path.abspath(run_directory)
    if not checkpointing.holds_a_run(run_directory):
        return None
    saved = read_saved_config(run_directory)
    if saved is None or BUDGET_KEY not in saved:
        return None
    saved_values = resolved(saved)
    before = int(saved_values[BUDGET_KEY])
    after = int(config.get(BUDGET_KEY))
    if after == before:
        return None
    if after < before:
        raise ConfigError(
            BUDGET_KEY,
            f"is {after} but the run in {run_directory} used {before}; a resumed run can be extended "
            "(a larger max_actor_steps), not shortened",
        )
    horizon, stretched = derived_settings(saved, after)
    if horizon and choice is None:
        raise ConfigError(
            "extend",
            f"the run in {run_directory} is extended from {before} to {after} actor steps and {', '.join(horizon)} "
            f"follow max_actor_steps: add extend=keep (they keep their horizon, {before}: the schedules stay where "
            f"they ended) or extend=stretch (they stretch to {after})",
        )
    fixed = kept_replay_size(saved_values, OmegaConf.select(config, "launcher._target_"), before)
    return Extension(run_directory, before, after, choice or "keep", horizon, stretched, fixed)


def extend_config(config: DictConfig, run_directory: str) -> Extension | None:
    """Sets the settings `config` derives from its budget to the values the extension chooses (the run's
    own under `keep`), before the experiment is built from it; returns the extension (None: not one)."""
    extension = find_extension(config, run_directory)
    if extension is None:
        return None
    for key, value in extension.stretched.items():
        if OmegaConf.select(config, key) != value:  # Not what the interpolation gives: set on the command line.
            raise ConfigError(
                key,
                f"follows max_actor_steps, so an extension sets it: extend=keep ({extension.horizon[key]}) or "
                f"extend=stretch ({value}); drop it from the command line",
            )
    for key, value in extension.schedule.items():
        OmegaConf.update(config, key, value, merge=False)
    return extension


def override(key: str, value: Any) -> str:
    """`key=value` as Hydra parses it back to `value`."""
    text = value if isinstance(value, (int, float)) and not isinstance(value, bool) else json.dumps(value)
    return f"{key}={text}"


def record(extension: Extension, session: int) -> None:
    """Makes the extension the run's own: `.hydra/config.yaml` and `.hydra/overrides.yaml` take the new budget
    (and, under `keep`, the horizon of each derived setting), so `resume=DIR` alone continues the extended
    run; the finished run's `summary.json` moves to `logs/superseded/` (the run is not finished any more)."""
    hydra_directory = os.path.join(extension.run_directory, ".hydra")
    config_path = os.path.join(hydra_directory, "config.yaml")
    config = OmegaConf.load(config_path)
    pinned = extension.pinned
    for key, value in {BUDGET_KEY: extension.after, **pinned}.items():
        OmegaConf.update(config, key, value, merge=False)
    OmegaConf.save(config, config_path)
    overrides_path = os.path.join(hydra_directory, "overrides.yaml")
    overrides = []
    if os.path.isfile(overrides_path):
        with open(overrides_path) as file:
            overrides = [str(entry) for entry in yaml.safe_load(file) or []]
    changed = [override(key, value) for key, value in {BUDGET_KEY: extension.after, **pinned}.items()]
    keys = {entry.split("=", 1)[0] for entry in changed}
    kept = [entry for entry in overrides if entry.split("=", 1)[0].lstrip("+~") not in keys]
    with open(overrides_path, "w") as file:
        yaml.safe_dump([*kept, *changed], file, default_flow_style=False)
    summary = os.path.join(extension.run_directory, SUMMARY_FILE)
    if os.path.isfile(summary):
        superseded = os.path.join(extension.run_directory, "logs", "superseded")
        os.makedirs(superseded, exist_ok=True)
        shutil.move(summary, os.path.join(superseded, f"summary.session{session}.json"))
