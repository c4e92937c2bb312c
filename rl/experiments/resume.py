"""Starting or resuming a run in its run directory (`hydra.run.dir=DIR` or `resume=DIR`).

`prepare_run` checks everything before anything is written (the configuration is the run's
own but for `MUTABLE_KEYS`; the newest undamaged checkpoint fits this config's learner and
tables): a failure is one `ConfigError`/`CheckpointError` line. `apply_plan` renames damaged
newer checkpoints, moves later log rows to `logs/superseded/`, continues the clock and W&B run.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import functools
import json
import os
import secrets
import shutil
import string
import time
import warnings
from typing import Any, Callable, Mapping

from rl import checkpointing
from rl.checkpointing import RUN_FILE, SUMMARY_FILE, CheckpointError, RunWarning, flatten_mapping, log_files
from rl.experiments.summary import write_json
from rl.loggers.csv import move_rows

# Top-level keys a resumed run may change: they do not change what is learned.
MUTABLE_KEYS = ("progress", "logger", "launcher", "checkpoint", "compilation_cache", "resume")


@dataclasses.dataclass
class RestorePoint:
    """The checkpoint a run continues from and its state item."""

    checkpoint: str
    state: dict[str, Any]
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    restore_replay: bool = False  # Whether the replay tables are restored from it.

    @property
    def counts(self) -> dict[str, Any]:
        return dict(self.state["counts"])

    @property
    def actor_steps(self) -> int:
        return int(self.state["actor_steps"])

    @property
    def replay_checkpoint(self) -> str:
        return checkpointing.replay_of(self.checkpoint)

    def learner_state(self, template: Any) -> Any:
        return checkpointing.restore_learner_state(self.checkpoint, template)


@dataclasses.dataclass
class RunPlan:
    """What the entry point does with a run directory."""

    run_directory: str
    finished: dict[str, Any] | None = None  # A finished run's summary: nothing to do.
    restore: RestorePoint | None = None  # None: start from the beginning.
    previous: bool = False  # An earlier run's rows after the restore point are set aside.
    session: int = 0  # 0 for a new run, one more for each resume.
    wandb_run_id: str | None = None


def _read_json(path: str) -> dict[str, Any]:
    """The JSON object in `path` ({} when missing, unreadable or no object)."""
    try:
        with open(path) as file:
            value = json.load(file)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, current value) for every setting a resumed run may not change."""
    before, now = flatten_mapping(saved), flatten_mapping(current)
    keys = sorted(key for key in set(before) | set(now) if key.split(".")[0] not in MUTABLE_KEYS)
    values = [(key, before.get(key, "<unset>"), now.get(key, "<unset>")) for key in keys]
    return [difference for difference in values if difference[1] != difference[2]]


def _saved_config(run_directory: str) -> dict[str, Any] | None:
    from omegaconf import OmegaConf

    path = os.path.join(run_directory, ".hydra", "config.yaml")
    if not os.path.isfile(path):
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as error:  # noqa: BLE001 - an unreadable or unresolvable file: say so.
        raise CheckpointError(f"cannot read the run's configuration {path} ({error})") from None


def prepare_run(
    experiment: Any,
    config: Any,
    run_directory: str,
    explicit: bool = False,
    learner_template: Callable[[Any], Any] | None = None,
) -> RunPlan:
    """Whether the run in `run_directory` is new, finished or to be resumed; writes nothing.
    `explicit` (`resume=DIR`): nothing to resume is an error. `learner_template(experiment)`:
    the state the launcher checkpoints (default: the builder's learner's)."""
    from rl.experiments.make_experiment import ConfigError

    warn = functools.partial(warnings.warn, category=RunWarning, stacklevel=2)
    run_directory = os.path.abspath(run_directory)
    run_file = _read_json(os.path.join(run_directory, RUN_FILE))
    plan = RunPlan(run_directory, wandb_run_id=run_file.get("wandb_run_id"))
    if not checkpointing.holds_a_run(run_directory):
        if explicit:
            raise ConfigError("resume", f"{run_directory} holds no run to resume (no run.json, checkpoint or logs)")
        return plan
    plan.previous = True
    plan.session = int(run_file.get("sessions", 1))

    saved = _saved_config(run_directory)
    if saved is not None:
        from rl.experiments.make_experiment import resolved_container

        differences = config_differences(saved, resolved_container(config))
        if differences:
            key, before, now = differences[0]
            more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
            raise ConfigError(
                key,
                f"is {now!r} but the run in {run_directory} used {before!r}{more}; a resumed run keeps its "
                "configuration: repeat the run's own command, or use a new hydra.run.dir for a new run",
            )

    summary = _read_json(os.path.join(run_directory, SUMMARY_FILE))
    if summary.get("status") == "finished":
        plan.finished = summary
        return plan

    path, skipped = checkpointing.find_latest(run_directory, warn=False)
    for damaged, reason in skipped:
        warn(f"checkpoint {damaged} is damaged ({reason}); using the previous one")
    if path is None:
        if explicit:
            raise CheckpointError(
                f"no checkpoint to resume in {checkpointing.checkpoint_root(run_directory)} (the run stopped before "
                "its first checkpoint, or ran with checkpoint.enabled=false)"
            )
        warn(
            f"{run_directory} holds an earlier run but no checkpoint: the run starts from the beginning "
            "(earlier log rows move to logs/superseded/)"
        )
        return plan
    state = checkpointing.read_state(path)
    for key, value in (("agent", experiment.agent_name), ("environment", experiment.environment_name)):
        if state.get(key) != value:
            raise CheckpointError(f"checkpoint {path} is of {key} {state.get(key)!r}, this config's is {value!r}")
    from rl.experiments.launchers.base import Launcher

    template = (learner_template or Launcher().checkpoint_template)(experiment)
    checkpointing.check_learner_structure(path, template)
    if state["actor_steps"] > experiment.max_actor_steps:
        raise CheckpointError(
            f"checkpoint {path} is at {state['actor_steps']} actor steps, beyond max_actor_steps={experiment.max_actor_steps}"
        )
    restore = RestorePoint(path, state, skipped)
    has_replay = os.path.isdir(restore.replay_checkpoint)
    if has_replay and experiment.checkpoint.replay:
        from rl.experiments.builders import DistributedProgram

        checkpointing.check_replay_tables(restore.checkpoint, DistributedProgram(experiment).make_replay_tables())
        restore.restore_replay = True
    elif has_replay or experiment.checkpoint.replay:
        warn(
            "the checkpoint's replay buffer is not restored (checkpoint.replay=false): the run refills it"
            if has_replay
            else "the checkpoint holds no replay buffer: the resumed run refills it"
        )
    plan.restore = restore
    plan.session = int(state.get("session", 0)) + 1
    return plan


def trim_logs(run_directory: str, actor_steps: int, learner_steps: int, session: int) -> None:
    """Moves the log rows written after the restore point to logs/superseded/."""

    def after(row: dict[str, str]) -> bool:
        for key, limit in (("actor_steps", actor_steps), ("learner_steps", learner_steps)):
            try:
                if float(row.get(key) or "nan") > limit:
                    return True
            except ValueError:
                continue
        return False

    for path in log_files(run_directory):
        with open(path, newline="") as file:
            if "actor_steps" not in (csv.DictReader(file).fieldnames or []):
                continue
        label = os.path.splitext(os.path.basename(path))[0]
        move_rows(path, after, os.path.join(os.path.dirname(path), "superseded", f"{label}.session{session}.csv"))


def apply_plan(plan: RunPlan, experiment: Any) -> Any:
    """Sets the run up as planned; returns the experiment to launch (restore point, session)."""
    run_directory = plan.run_directory
    restore = plan.restore
    if restore is not None:
        for damaged, _ in restore.skipped:
            target = os.path.join(os.path.dirname(damaged), f"damaged_{os.path.basename(damaged)}")
            if not os.path.exists(target):
                os.rename(damaged, target)
    if plan.previous:
        counts = restore.counts if restore is not None else {}
        trim_logs(run_directory, int(counts.get("actor_steps", 0)), int(counts.get("learner_steps", 0)), plan.session)
    replay_root = checkpointing.replay_root(run_directory)
    if os.path.isdir(replay_root):  # Table checkpoints never moved into a step: unpaired leftovers.
        for name in os.listdir(replay_root):
            shutil.rmtree(os.path.join(replay_root, name), ignore_errors=True)
    factory = experiment.logger_factory
    if restore is not None and restore.state.get("wall_time_s") is not None and factory.start_time is not None:
        factory.start_time = time.time() - float(restore.state["wall_time_s"])
    run_id = plan.wandb_run_id or "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    if factory.wandb_run is not None:
        factory.wandb_run.use_run_id(run_id, resume=plan.previous)
    path = os.path.join(run_directory, RUN_FILE)
    history = list(_read_json(path).get("history", []))
    history.append(
        {
            "session": plan.session,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "restored_from": os.path.basename(restore.checkpoint) if restore is not None else None,
        }
    )
    os.makedirs(run_directory, exist_ok=True)
    write_json(path, {"wandb_run_id": run_id, "sessions": plan.session + 1, "history": history})
    return dataclasses.replace(experiment, restore=restore, session=plan.session)
