"""Weights & Biases: one run per experiment, every node's records namespaced by label.

All curves are plotted against `actor_steps`, the x-axis every node's records carry
(logged once per record, outside the namespaces), so a learner curve and an evaluation
curve of one run, or of two runs with different replay ratios, line up. A node's
namespace holds its own metrics, its own counts (`learner/learner_steps`) and its steps
key, not the other nodes' counts that every record carries, nor its instance id
(`actor/actor_id`). Only a node whose records lack `actor_steps` (a logger used without
the run's counter) is plotted against its own steps key instead. The run's summary holds
the results of summary.json (final and best evaluation return, steps per second, ...).
The run config is the resolved composed config plus the code's git commit and whether
the work tree was dirty; secrets (API keys, tokens, passwords) never reach it.

The runs of one multirun share a group named after what they run and when the sweep
started (`default_group`), and each run is tagged with its job's overrides.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import threading
from typing import Any, Mapping, Sequence

from rl.loggers.base import Logger, LoggingData, to_python_scalar

STEP_METRIC = "actor_steps"
# Step and episode counts (`learner_steps`, `evaluator_episodes`): each node's own.
COUNT_KEY = re.compile(r"^(?P<node>[a-z0-9]+)_(steps|episodes)$")
# summary.json's fields that become the W&B run's summary metrics.
SUMMARY_KEYS = (
    "final_eval_return",
    "best_eval_return",
    "actor_steps_per_second",
    "time_to_threshold_s",
    "steps_to_threshold",
    "actor_steps",
    "learner_steps",
    "episodes",
    "wall_time_s",
    "status",
)
# W&B refuses tags longer than this.
MAX_TAG_LENGTH = 64
REDACTED = "<redacted>"
# Config keys whose values are never written to a run config.
SECRET_KEY_PATTERN = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
# Environment variables whose values are scrubbed wherever they appear in a config.
SECRET_ENVIRONMENT_VARIABLES = ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE")
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def git_state(directory: str | None = None) -> dict[str, Any] | None:
    """The commit checked out in `directory` (the code's repository by default) and
    whether tracked files have uncommitted changes; None outside a git repository."""
    directory = directory or _CODE_ROOT

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=20, check=False)

    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip()) or status.returncode != 0}


def redact_secrets(value: Any, secrets: Sequence[str] | None = None) -> Any:
    """A copy of a config with secret-looking keys and known secret values masked."""
    if secrets is None:
        secrets = [os.environ[name] for name in SECRET_ENVIRONMENT_VARIABLES if os.environ.get(name)]
    secrets = [secret for secret in secrets if len(secret) >= 4]
    if isinstance(value, Mapping):
        return {
            key: (
                REDACTED
                if isinstance(key, str) and SECRET_KEY_PATTERN.search(key) and item
                else redact_secrets(item, secrets)
            )
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
    return value


def node_metrics(label: str, data: LoggingData, steps_key: str | None = None) -> dict[str, Any]:
    """What a node's namespace shows of one of its records: its own metrics and counts,
    and its steps key.

    Dropped: `actor_steps` (the x-axis, logged outside the namespaces), the other
    nodes' counts (`learner_steps` in an actor's record) unless one is the node's
    `steps_key`, and the instance id (`<label>_id`, constant for a node).
    """
    metrics = {}
    for key, value in data.items():
        if key == STEP_METRIC or key == f"{label}_id":
            continue
        count = COUNT_KEY.match(key)
        if count is not None and count.group("node") != label and key != steps_key:
            continue
        metrics[key] = to_python_scalar(value)
    return metrics


def step_metric(label: str, data: LoggingData, steps_key: str | None = None) -> str:
    """The x-axis of node `label`'s namespace, from its first record: `actor_steps`,
    which every node's records carry, so that all curves are comparable; the node's own
    steps key (`<label>/<steps_key>`) only when its records lack `actor_steps`."""
    if STEP_METRIC in data or not steps_key or steps_key not in data:
        return STEP_METRIC
    return f"{label}/{steps_key}"


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a run summary (summary.json) that W&B shows as the run's results;
    unknown (None) and non-finite values are left out."""
    values = {}
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        values[key] = value
    return values


_SWEEP_STAMP = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})[/\\_T -]+(?P<time>\d{2}[-:]\d{2}[-:]\d{2})$")


def default_group(sweep_dir: str, subject: Sequence[str] = ()) -> str:
    """The W&B group of a multirun's jobs: `<subject>-<when>`, e.g.
    `dqn_cartpole-CartPole-v1-2024-05-01-19-09-19`.

    `subject` is what every job of the sweep shares (the experiment or agent, the
    environment; the caller leaves out what the sweep varies). `<when>` is the date and
    time of Hydra's default sweep directory (`multirun/2024-05-01/19-09-19`), or the
    sweep directory's own name when it was named on the command line.
    """
    path = os.path.normpath(str(sweep_dir))
    stamp = _SWEEP_STAMP.search(path)
    when = f"{stamp.group('date')}-{stamp.group('time').replace(':', '-')}" if stamp else os.path.basename(path)
    parts = [str(part).replace("/", "-") for part in subject if part] + [when or "multirun"]
    return "-".join(parts)


def override_tags(overrides: Sequence[str]) -> list[str]:
    """A job's command-line overrides as W&B tags (`seed=1`, `agent.learning_rate=0.001`),
    Hydra's own (`hydra.*`) left out; tags longer than W&B allows are shortened."""
    tags = []
    for override in overrides:
        override = str(override)
        if override.lstrip("+~").startswith("hydra.") or override.lstrip("+~").startswith("hydra/"):
            continue
        if len(override) > MAX_TAG_LENGTH:
            override = override[: MAX_TAG_LENGTH - 1] + "…"
        if override not in tags:
            tags.append(override)
    return tags


class WandbRun:
    """Owns the wandb run of one experiment; started on first use, finished once.

    A resumed experiment continues its W&B run: the run id is kept in the run directory
    (run.json) and passed back with `use_run_id(..., resume=True)`.

    `mode` is "online", "offline" or "disabled"; None leaves it to WANDB_MODE (online
    when unset). `git=True` records the code's commit and dirty flag under `git` in the
    run config.
    """

    def __init__(
        self,
        project: str,
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        mode: str | None = None,
        name: str | None = None,
        directory: str | None = None,
        config: Mapping[str, Any] | None = None,
        git: bool = True,
        reinit: str = "finish_previous",
    ):
        if mode is not None and mode not in ("online", "offline", "disabled"):
            raise ValueError(f"logger.wandb.mode must be online, offline, disabled or null, got {mode!r}")
        run_config = redact_secrets(dict(config or {}))
        if git:
            run_config["git"] = git_state()
        self._settings = dict(
            project=project,
            entity=entity,
            group=group,
            tags=list(tags) or None,
            mode=mode,
            name=name,
            dir=directory,
            config=run_config,
            id=None,
            resume=None,
        )
        # wandb.init's `reinit`: "finish_previous" ends any run this process still has
        # open (a multirun's previous job); "create_new" lets runs coexist (replicas).
        self._reinit = reinit
        self._run = None
        self._lock = threading.Lock()
        self._defined: set[str] = set()
        self.finished_with: int | None = None

    @property
    def name(self) -> str | None:
        return self._settings["name"]

    @property
    def group(self) -> str | None:
        return self._settings["group"]

    @property
    def config(self) -> dict[str, Any]:
        return self._settings["config"]

    @property
    def run_id(self) -> str | None:
        """The W&B run id (None: W&B picks one when the run starts)."""
        return self._settings["id"]

    def use_run_id(self, run_id: str, resume: bool = False) -> None:
        """Logs to the run `run_id`; `resume=True` continues it (a resumed experiment)
        rather than starting it. Call before the run starts."""
        if self._run is not None:
            raise RuntimeError("the W&B run has started already; set its id before")
        self._settings["id"] = run_id
        self._settings["resume"] = "allow" if resume else None

    @property
    def started(self) -> bool:
        return self._run is not None

    @property
    def run(self):
        with self._lock:
            if self._run is None:
                import wandb  # Imported lazily: only runs that log to wandb pay for it.

                if self._settings["dir"]:
                    os.makedirs(self._settings["dir"], exist_ok=True)
                # W&B reports non-zero exits (an interrupted run's 130/143 too) to its own
                # error tracker, retrying noisily offline; WANDB_ERROR_REPORTING=true restores it.
                os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
                self._run = wandb.init(reinit=self._reinit, **self._settings)
                self._run.define_metric(STEP_METRIC)
                self.finished_with = None
            return self._run

    def replica(self, index: int, seed: int, directory: str | None = None) -> "WandbRun":
        """A run of its own for replica `index` (trained with `seed`) of a run that trains
        several seeds in one process (launcher=anakin): named `<name>-seed_<index>`, in
        this run's group (or, without one, a group named after this run, so the replicas
        plot as seeds of one experiment), its config this run's with `seed` and
        `replica`, its id derived from this run's (a resumed run continues its
        replicas' runs too), its files under `directory` (None: this run's). It coexists
        with this run and the other replicas' (wandb's reinit="create_new"); start this
        run first, since it finishes the runs open when it starts."""
        settings = dict(self._settings)
        if directory is not None:
            settings["dir"] = directory
        settings["name"] = f"{self.name}-seed_{index}" if self.name else f"seed_{index}"
        settings["group"] = self.group or self.name
        settings["config"] = {**self.config, "seed": seed, "replica": index}
        settings["id"] = f"{self.run_id}-seed_{index}" if self.run_id else None
        replica = WandbRun(self._settings["project"], git=False, reinit="create_new")
        replica._settings = settings
        return replica

    def start(self) -> None:
        """Starts the run now (otherwise the first record starts it)."""
        self.run  # noqa: B018 - the property starts the run.

    @property
    def tags(self) -> list[str]:
        return list(self._settings["tags"] or [])

    def log(self, label: str, data: LoggingData, steps_key: str | None = None) -> None:
        """Logs a record of node `label` in its namespace (see the module docstring)."""
        run = self.run
        if label not in self._defined:
            axis = step_metric(label, data, steps_key)
            if axis != STEP_METRIC:
                run.define_metric(axis)  # Its own x-axis, not plotted against itself.
            run.define_metric(f"{label}/*", step_metric=axis)
            self._defined.add(label)
        row = {f"{label}/{key}": value for key, value in node_metrics(label, data, steps_key).items()}
        if STEP_METRIC in data:
            row[STEP_METRIC] = to_python_scalar(data[STEP_METRIC])
        run.log(row)

    def summarize(self, summary: Mapping[str, Any]) -> None:
        """Sets the run's summary metrics from a run summary (summary.json's fields)."""
        values = summary_metrics(summary)
        if values:
            self.run.summary.update(values)

    def finish(self, exit_code: int = 0) -> None:
        """Ends the run: exit code 0 marks it finished, anything else failed/crashed."""
        with self._lock:
            if self._run is not None:
                self._run.finish(exit_code=exit_code)
                self._run = None
                self._defined.clear()
                self.finished_with = exit_code


class WandbLogger(Logger):
    def __init__(self, run: WandbRun, label: str, steps_key: str | None = None):
        self._run = run
        self._label = label
        self._steps_key = steps_key

    def write(self, data: LoggingData) -> None:
        self._run.log(self._label, data, self._steps_key)
