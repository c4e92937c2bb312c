"""Output a researcher cannot act on, dropped where it is made: reverb's C++ INFO lines on fd 2,
MuJoCo's deprecation warnings in third-party models, a sweep's libraries narrating at INFO."""

from __future__ import annotations

import contextlib
import logging
import re
import os
import subprocess
import sys
import threading
from typing import Any, Iterator

# reverb's informational lines (`[reverb/cc/<file>:<line>] <message>`), as grep -E patterns.
REVERB_INFO_LINES = (
    r"^\[reverb/cc/platform/default/server\.cc:[0-9]+\] (Started replay server on port [0-9]+|Shutting down replay server)$",
    r"^\[reverb/cc/client\.cc:[0-9]+\] Sampler and server are owned by the same process \([0-9]+\) so Table .+"
    r" is accessed directly without gRPC\.$",
    r"^\[reverb/cc/platform/tfrecord_checkpointer\.cc:[0-9]+\] +(Initializing TFRecordCheckpointer in |Loading latest"
    r" checkpoint from |No checkpoint found in |Saving checkpoint to |Writing checkpoint to )",
    r"^\[reverb/cc/reverb_service_impl\.cc:[0-9]+\] Stored checkpoint to ",
)
MUJOCO_KNOWN_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)
CHATTY_LOGGERS = ("alembic",)
_MUJOCO_LOCK = threading.RLock()


@contextlib.contextmanager
def reverb_info_filtered() -> Iterator[None]:
    """Within the block, fd 2 goes through `grep -v REVERB_INFO_LINES` (its own process: what a
    dying run wrote still shows)."""
    original = filter_process = None
    arguments = ["grep", "--line-buffered", "-v", "-E", *(a for p in REVERB_INFO_LINES for a in ("-e", p))]
    try:
        original = os.dup(2)
        filter_process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=original, stderr=subprocess.DEVNULL)
    except OSError:
        if original is not None:
            os.close(original)
    if filter_process is None:  # Unchanged: no fd 2, or no grep.
        yield
        return
    sys.stderr.flush()
    os.dup2(filter_process.stdin.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)
        os.close(original)
        # grep exits once every writer (a child started meanwhile too) has closed the pipe.
        filter_process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            filter_process.wait(timeout=1.0)


@contextlib.contextmanager
def known_warnings_dropped() -> Iterator[None]:
    """Within the block, MuJoCo's `MUJOCO_KNOWN_WARNINGS` are dropped and the others passed on."""
    import mujoco

    def hook(message: str) -> None:
        if message.startswith(MUJOCO_KNOWN_WARNINGS):
            return
        if previous is not None:
            previous(message)
        else:
            print(f"WARNING: {message}", file=sys.stderr, flush=True)

    with _MUJOCO_LOCK:  # One hook per process: loads on several threads take turns.
        previous = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(hook)
        try:
            yield
        finally:
            mujoco.set_mju_user_warning(previous)


# Hydra's launchers, whose job lines (`#3 : agent.lr=...`) would show what a search sets for each job to read.
LAUNCHER_LOGGERS = (
    "hydra._internal.core_plugins.basic_launcher",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher",
)
JOB_ENVIRONMENT = re.compile(r"\s*\+{0,2}hydra\.job\.env_set\.\S+")


def without_job_environment(record: logging.LogRecord) -> bool:
    """Drops the `++hydra.job.env_set.<NAME>=...` overrides (a pruning search's storage, study and trial) from a
    launcher's job line: the line shows what the job varies."""
    message = record.getMessage()
    if JOB_ENVIRONMENT.search(message):
        record.msg = JOB_ENVIRONMENT.sub("", message)
        record.args = None
    return True


def quiet_libraries() -> Any:
    """A Hydra callback that sets `CHATTY_LOGGERS` (and optuna) to WARNING when a multirun starts, and keeps a
    search's per-job environment out of the launchers' job lines."""
    from hydra.experimental.callback import Callback  # Hydra loads it only for a multirun.

    class QuietLibraries(Callback):
        def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
            for name in CHATTY_LOGGERS:
                logging.getLogger(name).setLevel(logging.WARNING)
            for name in LAUNCHER_LOGGERS:
                logging.getLogger(name).addFilter(without_job_environment)
            if "optuna" in str(config.hydra.sweeper.get("_target_", "")).lower():
                import optuna  # The sweeper imports it next anyway.

                optuna.logging.set_verbosity(optuna.logging.WARNING)

    return QuietLibraries()
