"""Experiments: configuration, node builders and launchers.

The names below are imported when first used (PEP 562), not with the package: a module
that needs only `rl.experiments.interrupts` or `rl.experiments.summary` (the entry
point's `--help`, `--cfg` and configuration errors) does not pay for JAX, TensorFlow and
reverb, which the builders and `run_local` import.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ExperimentConfig": "rl.experiments.config",
    "RunSummary": "rl.experiments.summary",
    "build_actor": "rl.experiments.builders",
    "build_evaluator": "rl.experiments.builders",
    "build_learner": "rl.experiments.builders",
    "read_summary": "rl.experiments.summary",
    "run_local": "rl.experiments.run_local",
    "write_summary": "rl.experiments.summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rl.experiments' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # Imported once.
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
