"""Starting or resuming a run in its directory: `prepare_run` decides (new, finished or resumed from a
checkpoint) and checks everything without writing; `apply_plan` then sets the directory up. The
checkpoints themselves are `rl.checkpointing`'s."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import os
import secrets
import shutil
import time
import warnings
from typing import Any, Callable

from omegaconf import OmegaConf

from rl import checkpointing
from rl.checkpointing import RUN_FILE, SUMMARY_FILE, CheckpointError, RunWarning, read_json
from rl.experiments import extension as extending
from rl.experiments.extension import Extension
from rl.experiments.launcher import Launcher
from rl.experiments.make_experiment import resolved_container
from rl.experiments.saved_config import read_saved_config, saved_config_path
from rl.experiments.validation import ConfigError
from rl.loggers.csv import move_rows

# Top-level keys a resumed run may change: they do not change what is learned.
MUTABLE_KEYS = ("progress", "logger", "launcher", "checkpoint", "compilation_cache", "resume", "objective", "extend")


@dataclasses.dataclass
class RestorePoint:
    """The checkpoint a run continues from and its state item."""

    checkpoint: str
    state: dict[str, Any]
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    restore_replay: bool = False

    @property
    def counts(self) -> dict[str, Any]:
        return dict(self.state["counts"])

    def learner_state(self, template: Any) -> Any:
        return checkpointing.restore_learner_state(self.checkpoint, template)


@dataclasses.dataclass
class RunPlan:
    """What the entry point does with a run directory."""

    run_directory: str
    finished: dict[str, Any] | None = None  # A finished run's summary: nothing to do.
    restore: RestorePoint | None = None  # None: start from the beginning.
    session: int = 0  # 0 for a new run, one more for each resume (an earlier run's later rows are set aside).
    extension: Extension | None = None  # A larger max_actor_steps than the run's own (rl/experiments/extension.py).


def _warn(message: str) -> None:
    warnings.warn(message, RunWarning, stacklevel=3)


def prepare_run(
    experiment: Any,
    config: Any,
    run_directory: str,
    explicit: bool = False,
    learner_template: Callable[[Any], Any] | None = None,
) -> RunPlan:
    """Whether the run in `run_directory` is new, finished or to be resumed; checks everything, writes
    nothing. `explicit` (`resume=DIR`): nothing to resume is an error."""
    run_directory = os.path.abspath(run_directory)
    plan = RunPlan(run_directory)
    if not checkpointing.holds_a_run(run_directory):
        if explicit:
            raise ConfigError("resume", f"{run_directory} holds no run to resume (no run.json, checkpoint or logs)")
        return plan
    plan.session = int(read_json(os.path.join(run_directory, RUN_FILE)).get("sessions", 1))
    plan.extension = extending.find_extension(config, run_directory)
    check_same_config(config, run_directory, plan.extension)
    summary = read_json(os.path.join(run_directory, SUMMARY_FILE))
    if summary.get("status") == "pruned" and plan.extension is not None:
        raise ConfigError("max_actor_steps", f"the run in {run_directory} was pruned by its search and is not extended")
    if summary.get("status") in ("finished", "pruned") and plan.extension is None:  # A pruned trial is over.
        plan.finished = summary
        return plan
    path, skipped = checkpointing.find_latest(run_directory)
    if path is None:
        if plan.extension is not None:
            raise CheckpointError(
                f"no checkpoint to extend in {checkpointing.checkpoint_root(run_directory)} (the run ran with "
                "checkpoint.enabled=false, or its checkpoints were removed)"
            )
        if explicit:
            raise CheckpointError(
                f"no checkpoint to resume in {checkpointing.checkpoint_root(run_directory)} (the run stopped before "
                "its first checkpoint, or ran with checkpoint.enabled=false)"
            )
        _warn(
            f"{run_directory} holds an earlier run but no checkpoint: the run starts from the beginning "
            "(earlier log rows move to logs/superseded/)"
        )
        return plan
    plan.restore = restore_point(experiment, path, skipped, learner_template or Launcher().checkpoint_template)
    plan.session = int(plan.restore.state.get("session", 0)) + 1
    return plan


def check_same_config(config: Any, run_directory: str, extension: Extension | None = None) -> None:
    """Raises a `ConfigError` naming the first setting outside `MUTABLE_KEYS` that differs from the
    run's own `.hydra/config.yaml` (none to compare with: nothing to check); an `extension` may change the
    budget and, as it chose, the settings derived from it."""
    saved = read_saved_config(run_directory)
    if saved is None:
        return
    try:
        before = checkpointing.flatten_mapping(OmegaConf.to_container(saved, resolve=True))
    except Exception as error:  # noqa: BLE001 - an unresolvable file: say so.
        path = saved_config_path(run_directory)
        raise CheckpointError(f"cannot read the run's configuration {path} ({error})") from None
    now = checkpointing.flatten_mapping(resolved_container(config))
    if extension is not None:
        before = {**before, extending.BUDGET_KEY: extension.after, **extension.schedule}
    differences = [
        key
        for key in sorted(set(before) | set(now))
        if key.split(".")[0] not in MUTABLE_KEYS and before.get(key, "<unset>") != now.get(key, "<unset>")
    ]
    if differences:
        key = differences[0]
        more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
        raise ConfigError(
            key,
            f"is {now.get(key, '<unset>')!r} but the run in {run_directory} used {before.get(key, '<unset>')!r}{more}; "
            "a resumed run keeps its configuration: repeat the run's own command, or use a new hydra.run.dir for a new run",
        )


def restore_point(
    experiment: Any, path: str, skipped: list[tuple[str, str]], learner_template: Callable[[Any], Any]
) -> RestorePoint:
    """The checkpoint at `path` as the run's restore point, once it is known to be this experiment's."""
    state = checkpointing.read_state(path)
    for key, value in (("agent", experiment.agent_name), ("environment", experiment.environment_name)):
        if state.get(key) != value:
            raise CheckpointError(f"checkpoint {path} is of {key} {state.get(key)!r}, this config's is {value!r}")
    checkpointing.check_learner_structure(path, learner_template(experiment))
    if state["actor_steps"] > experiment.max_actor_steps:
        raise CheckpointError(
            f"checkpoint {path} is at {state['actor_steps']} actor steps, beyond max_actor_steps={experiment.max_actor_steps}"
        )
    return RestorePoint(path, state, skipped, restore_replay=restores_replay(experiment, path))


def restores_replay(experiment: Any, path: str) -> bool:
    """Whether the replay buffer saved at `path` is restored (its tables checked against this config's)."""
    has_replay = os.path.isdir(checkpointing.replay_of(path))
    if has_replay and experiment.checkpoint.replay:
        tables = experiment.builder.make_replay_tables(experiment.environment_spec)
        checkpointing.check_replay_tables(path, tables)
        return True
    if has_replay or experiment.checkpoint.replay:
        _warn(
            "the checkpoint's replay buffer is not restored (checkpoint.replay=false): the run refills it"
            if has_replay
            else "the checkpoint holds no replay buffer: the resumed run refills it"
        )
    return False


def trim_logs(run_directory: str, session: int, counts: dict[str, Any] | None = None) -> None:
    """Moves the rows of the run's logs and of its replicas' written after the restore point's `counts` to
    each logs/superseded/; with no restore point (None: the run starts over) every row, so no curve repeats
    a step."""

    def after(row: dict[str, str]) -> bool:
        if counts is None:
            return True
        for key in ("actor_steps", "learner_steps"):
            try:
                if float(row.get(key) or "nan") > counts.get(key, 0):
                    return True
            except ValueError:
                continue
        return False

    for path in checkpointing.log_files(run_directory):
        with open(path, newline="") as file:
            if "actor_steps" not in (csv.DictReader(file).fieldnames or []):
                continue
        label = os.path.splitext(os.path.basename(path))[0]
        move_rows(path, after, os.path.join(os.path.dirname(path), "superseded", f"{label}.session{session}.csv"))


def apply_plan(plan: RunPlan, experiment: Any) -> Any:
    """Renames damaged checkpoints, sets later log rows aside, continues the clock and W&B run;
    returns the experiment to launch."""
    restore = plan.restore
    for damaged, _ in restore.skipped if restore is not None else ():
        target = os.path.join(os.path.dirname(damaged), f"damaged_{os.path.basename(damaged)}")
        if not os.path.exists(target):
            os.rename(damaged, target)
    if plan.extension is not None:
        extending.record(plan.extension, plan.session)
    if plan.session:
        trim_logs(plan.run_directory, plan.session, restore.counts if restore is not None else None)
    shutil.rmtree(checkpointing.replay_root(plan.run_directory), ignore_errors=True)  # Never moved into a step.
    factory = experiment.logger_factory
    if restore is not None and restore.state.get("wall_time_s") is not None and factory.start_time is not None:
        factory.start_time = time.time() - float(restore.state["wall_time_s"])
    record_session(plan, factory.wandb_run)
    return dataclasses.replace(experiment, restore=restore, session=plan.session)


def record_session(plan: RunPlan, wandb_run: Any) -> None:
    """run.json: the W&B run id (continued by `wandb_run` when there is one) and this session's entry."""
    path = os.path.join(plan.run_directory, RUN_FILE)
    run_file = read_json(path)
    run_id = run_file.get("wandb_run_id") or secrets.token_hex(4)
    if wandb_run is not None:
        wandb_run.use_run_id(run_id, resume=plan.session > 0)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    restored_from = os.path.basename(plan.restore.checkpoint) if plan.restore is not None else None
    history = [
        *run_file.get("history", []),
        {"session": plan.session, "started": started, "restored_from": restored_from},
    ]
    os.makedirs(plan.run_directory, exist_ok=True)
    checkpointing.write_json(path, {"wandb_run_id": run_id, "sessions": plan.session + 1, "history": history})


def rejoin_session(experiment: Any, run_directory: str) -> Any:
    """A rebuilt copy of an experiment whose session `apply_plan` opened in another process (a grid's
    driver prepares a job, a worker trains it): the session's number and W&B run id, read from run.json,
    nothing written. The session starts from scratch (no restore point)."""
    run_file = read_json(os.path.join(os.path.abspath(run_directory), RUN_FILE))
    session = max(int(run_file.get("sessions", 1)) - 1, 0)
    wandb_run = experiment.logger_factory.wandb_run
    if wandb_run is not None and run_file.get("wandb_run_id"):
        wandb_run.use_run_id(str(run_file["wandb_run_id"]), resume=session > 0)
    return dataclasses.replace(experiment, restore=None, session=session)
