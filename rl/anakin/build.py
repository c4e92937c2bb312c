"""Which swept values one replica's compiled system (rl/experiments/compiled.py's `make_system`) can take as
traced inputs in an anakin program."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from rl.experiments.compiled import make_system


def value_of(experiment: Any, key: str) -> Any:
    """A batchable key's value in a built experiment (None when the builder's dataclass has no such field)."""
    group, name = key.split(".", 1)
    part = experiment.builder.config if group == "agent" else experiment.builder.exploration
    fields = {field.name for field in dataclasses.fields(part)}
    return vars(part)[name] if name in fields else None  # A swept key, checked against the dataclass's fields.


def untraceable(experiment: Any, keys: Sequence[str]) -> str | None:
    """Why one replica's system cannot take `keys` as traced values (None: it can), from a trace only."""
    import jax

    from rl.systems.base import make_chunk

    def step(values: dict[str, jax.Array]) -> Any:
        system = make_system(experiment, values)
        return make_chunk(system, 1)(system.init(jax.random.PRNGKey(0)))

    try:
        jax.eval_shape(step, {key: np.float32(value_of(experiment, key)) for key in keys})
    except Exception as error:  # noqa: BLE001 - whatever the trace hits, the keys then split the group.
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None
