"""Saves and restores learner state (and counts) with orbax, one step directory per save."""

from __future__ import annotations

import os
import re
from typing import Any

import jax
import numpy as np

_STEP_DIR = re.compile(r"^step_(\d+)$")


def _checkpointer():
    import orbax.checkpoint as ocp  # Imported lazily: it is slow to import.
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # Orbax narrates every save at INFO.

    return ocp.PyTreeCheckpointer()


def save_checkpoint(directory: str, step: int, state: Any) -> str:
    """Writes `state` to `directory/step_<step>` (atomically, via orbax's temp dir)."""
    path = os.path.join(os.path.abspath(directory), f"step_{int(step)}")
    host_state = jax.tree_util.tree_map(np.asarray, state)
    _checkpointer().save(path, host_state, force=True)
    return path


def latest_checkpoint(directory: str) -> str | None:
    if not os.path.isdir(directory):
        return None
    steps = [int(m.group(1)) for name in os.listdir(directory) if (m := _STEP_DIR.match(name))]
    return os.path.join(directory, f"step_{max(steps)}") if steps else None


def restore_checkpoint(path: str) -> Any:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    return _checkpointer().restore(os.path.abspath(path))
