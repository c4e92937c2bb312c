"""A run directory's saved configuration (`.hydra/config.yaml`) as this version reads it. A class that moved
since the run was written is named where it lives now (`RENAMED_TARGETS`), so older runs can still be
evaluated (rl/evaluation.py), resumed (rl/experiments/resume.py) and extended (rl/experiments/extension.py),
each reading it through `read_saved_config`."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rl.checkpointing import CheckpointError

# A saved config's `_target_` -> the name of the same class now (the launchers moved out of rl/experiments/
# to sibling packages of one layer: rl/local/, rl/ray/, beside rl/anakin/ and rl/sebulba/).
RENAMED_TARGETS = {
    "rl.experiments.launchers.local.LocalLauncher": "rl.local.LocalLauncher",
    "rl.experiments.launchers.ray.RayLauncher": "rl.ray.RayLauncher",
}


def saved_config_path(run_directory: str) -> str:
    return os.path.join(run_directory, ".hydra", "config.yaml")


def with_current_targets(config: DictConfig) -> DictConfig:
    """`config` with each `_target_` that `RENAMED_TARGETS` lists given its new name, at any depth;
    interpolations stay unresolved."""
    return OmegaConf.create(_renamed(OmegaConf.to_container(config, resolve=False)))


def _renamed(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _renamed_entry(key, value) for key, value in node.items()}
    if isinstance(node, list):
        return [_renamed(item) for item in node]
    return node


def _renamed_entry(key: Any, value: Any) -> Any:
    if key == "_target_" and isinstance(value, str):
        return RENAMED_TARGETS.get(value, value)
    return _renamed(value)


def read_saved_config(run_directory: str) -> DictConfig | None:
    """The run's own configuration as Hydra saved it (interpolations unresolved), its renamed targets
    made current; None when it has none. An unreadable file is a `CheckpointError` naming it."""
    path = saved_config_path(run_directory)
    if not os.path.isfile(path):
        return None
    try:
        config = OmegaConf.load(path)
    except Exception as error:  # noqa: BLE001 - an unreadable file: say so.
        raise CheckpointError(f"cannot read the run's configuration {path} ({error})") from None
    return with_current_targets(config) if isinstance(config, DictConfig) else None
