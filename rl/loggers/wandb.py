"""Weights & Biases: one run per experiment, every node's records namespaced by label and
plotted against `actor_steps` (logged outside the namespaces; a node whose records lack it,
against its own steps key). The run config: the resolved config, git state, secrets redacted."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import subprocess
import threading
from typing import Any, Mapping, Sequence

from rl.loggers.base import COUNT_KEY, Logger, LoggingData, to_python_scalar

STEP_METRIC = "actor_steps"
SUMMARY_KEYS = tuple(
    "final_eval_return best_eval_return actor_steps_per_second time_to_threshold_s steps_to_threshold actor_steps "
    "learner_steps episodes wall_time_s status".split()
)
MAX_TAG_LENGTH = 64  # W&B refuses longer tags.
REDACTED = "<redacted>"
SECRET_KEY_PATTERN = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
SECRET_ENVIRONMENT_VARIABLES = ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE")
_SWEEP_STAMP = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})[/\\_T -]+(?P<time>\d{2}[-:]\d{2}[-:]\d{2})$")
# Overrides that change how a run is watched, not what it learns: no W&B tag.
UNTAGGED = ("hydra", "logger", "progress", "checkpoint", "compilation_cache", "resume")
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def git_state(directory: str | None = None) -> dict[str, Any] | None:
    """The commit of `directory` (None: the code's) and whether tracked files changed; None outside git."""
    git = functools.partial(subprocess.run, cwd=directory or _CODE_ROOT, capture_output=True, text=True, timeout=20)
    try:
        commit = git(["git", "rev-parse", "HEAD"], check=True)
        status = git(["git", "status", "--porcelain", "--untracked-files=no"])
    except (OSError, subprocess.SubprocessError):  # No git, or not a checkout.
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip()) or status.returncode != 0}


def redact_secrets(value: Any, secrets: Sequence[str] | None = None) -> Any:
    """A copy of a config with secret-looking keys and known secret values masked."""
    if secrets is None:
        secrets = [os.environ[name] for name in SECRET_ENVIRONMENT_VARIABLES if os.environ.get(name)]
    secrets = [secret for secret in secrets if len(secret) >= 4]
    if isinstance(value, Mapping):
        secret = lambda key, item: isinstance(key, str) and SECRET_KEY_PATTERN.search(key) and item
        return {key: REDACTED if secret(key, item) else redact_secrets(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_secrets(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
    return value


def node_metrics(label: str, data: LoggingData, steps_key: str | None = None) -> dict[str, Any]:
    """A record in node `label`'s namespace: all but `actor_steps`, `<label>_id` and the other nodes' counts."""
    metrics = {}
    for key, value in data.items():
        count = COUNT_KEY.match(key)
        if key in (STEP_METRIC, f"{label}_id") or (count and count.group("node") != label and key != steps_key):
            continue
        metrics[key] = to_python_scalar(value)
    return metrics


def step_metric(label: str, data: LoggingData, steps_key: str | None = None) -> str:
    """The x-axis of `label`'s namespace, from its first record: `actor_steps`, else `<label>/<steps_key>`."""
    if STEP_METRIC in data or not steps_key or steps_key not in data:
        return STEP_METRIC
    return f"{label}/{steps_key}"


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json's fields W&B shows as the run's results, but unknown (None) and non-finite ones."""
    values = {key: summary.get(key) for key in SUMMARY_KEYS}
    return {k: v for k, v in values.items() if v is not None and (not isinstance(v, float) or math.isfinite(v))}


def default_group(sweep_dir: str, subject: Sequence[str] = (), sweep_id: str | None = None) -> str:
    """A multirun's W&B group: what every job shares, then the date and time of Hydra's sweep directory
    or, for a directory named otherwise, its name and `sweep_id` (two sweeps there get two groups)."""
    path = os.path.normpath(str(sweep_dir))
    stamp = _SWEEP_STAMP.search(path)
    when = f"{stamp.group('date')}-{stamp.group('time').replace(':', '-')}" if stamp else os.path.basename(path)
    if not stamp and sweep_id:
        when = f"{when}-{sweep_id}"
    return "-".join([str(part).replace("/", "-") for part in subject if part] + [when or "multirun"])


def override_tags(overrides: Sequence[str], keys: set[str] | None = None) -> list[str]:
    """A job's command-line overrides as W&B tags, cut to W&B's length: those of `keys` (what a sweep
    varies) or, with no `keys`, all but `UNTAGGED` ones."""
    key = lambda tag: re.split(r"[=./]", tag.lstrip("+~"), maxsplit=1)[0]
    full_key = lambda tag: tag.lstrip("+~").split("=", 1)[0]
    kept = [
        tag for tag in map(str, overrides) if (full_key(tag) in keys if keys is not None else key(tag) not in UNTAGGED)
    ]
    return list(dict.fromkeys(tag if len(tag) <= MAX_TAG_LENGTH else tag[: MAX_TAG_LENGTH - 1] + "…" for tag in kept))


@dataclasses.dataclass(eq=False)
class WandbRun:
    """The wandb run of one experiment, started on first use, finished once. `mode` None: WANDB_MODE's.
    `reinit`: "finish_previous" ends a run still open (a multirun's last job), "create_new" keeps it (replicas)."""

    project: str
    entity: str | None = None
    group: str | None = None
    tags: Sequence[str] = ()
    mode: str | None = None
    name: str | None = None
    directory: str | None = None
    config: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    git: bool = True
    quiet: bool = True  # W&B's own lines: three at the start and none at the end (False: its full blocks).
    reinit: str = "finish_previous"

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in ("online", "offline", "disabled"):
            raise ValueError(f"logger.wandb.mode must be online, offline, disabled or null, got {self.mode!r}")
        self.config = redact_secrets(dict(self.config or {}))
        if self.git:
            self.config["git"] = git_state()
        self.id: str | None = None
        self.resume: str | None = None
        self._run = None
        self._lock = threading.Lock()
        self.defined: set[str] = set()

    def use_run_id(self, run_id: str, resume: bool = False) -> None:
        """Logs to the run `run_id` (kept in run.json), continuing it with `resume`; before it starts."""
        if self._run is not None:
            raise RuntimeError("the W&B run has started already; set its id before")
        self.id = run_id
        self.resume = "allow" if resume else None

    def start(self) -> Any:
        """Starts the run now, if it has not started, and returns it."""
        with self._lock:
            if self._run is None:
                import wandb

                if self.directory:
                    os.makedirs(self.directory, exist_ok=True)
                # Else W&B reports non-zero exits to its error tracker, retrying noisily offline.
                os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
                settings = dict(project=self.project, entity=self.entity, group=self.group, mode=self.mode)
                settings.update(name=self.name, dir=self.directory, config=self.config, id=self.id, resume=self.resume)
                quiet = wandb.Settings(quiet=self.quiet)
                self._run = wandb.init(reinit=self.reinit, tags=list(self.tags) or None, settings=quiet, **settings)
                self._run.define_metric(STEP_METRIC)
            return self._run

    def replica(self, index: int, seed: int, directory: str | None = None) -> "WandbRun":
        """Replica `index`'s run (launcher=anakin): `<name>-seed_<index>` in this run's group, files
        under `directory` (None: this run's). Start this run first: it finishes the runs open then."""
        replica = dataclasses.replace(
            self,
            name=f"{self.name}-seed_{index}" if self.name else f"seed_{index}",
            group=self.group or self.name,
            directory=self.directory if directory is None else directory,
            config={**self.config, "seed": seed, "replica": index},
            git=False,
            reinit="create_new",
        )
        replica.id = f"{self.id}-seed_{index}" if self.id else None
        replica.resume = self.resume
        return replica

    def finish(self, exit_code: int = 0) -> None:
        """Ends the run: exit code 0 marks it finished, anything else failed/crashed."""
        with self._lock:
            if self._run is not None:
                self._run.finish(exit_code=exit_code)
                self._run = None
                self.defined.clear()


@dataclasses.dataclass(eq=False)
class WandbLogger(Logger):
    """Node `label`'s records, in its namespace of `run`."""

    run: WandbRun
    label: str
    steps_key: str | None = None

    def write(self, data: LoggingData) -> None:
        run = self.run.start()
        label = self.label
        if label not in self.run.defined:
            axis = step_metric(label, data, self.steps_key)
            if axis != STEP_METRIC:
                run.define_metric(axis)  # Its own x-axis, not plotted against itself.
            run.define_metric(f"{label}/*", step_metric=axis)
            self.run.defined.add(label)
        row = {f"{label}/{key}": value for key, value in node_metrics(label, data, self.steps_key).items()}
        if STEP_METRIC in data:
            row[STEP_METRIC] = to_python_scalar(data[STEP_METRIC])
        run.log(row)
