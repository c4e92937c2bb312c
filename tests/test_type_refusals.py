"""A value of the wrong type for a config key is refused in one line that names the key, the value and the
expected type, with exit status 2, before anything starts: whichever key it is, whether Hydra's composition
checks it against a schema (an agent's options) or rl/experiments/validation.py does (run settings,
launchers, loggers). OmegaConf's own message runs over three lines (`full_key:`, `object_type=`)."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conftest import run_train
from rl.agents.configs import register_schemas
from rl.checkpointing import CheckpointSettings
from rl.experiments.schemas import FACTORY_OPTIONS, checkable, hints, stored_schemas
from rl.experiments.validation import ConfigError, RunSettings, check_values, type_refusal


@pytest.mark.current
@pytest.mark.parametrize(
    "overrides,line",
    [
        (["agent.batch_size=abc"], "agent.batch_size: expected int, got 'abc'"),
        (
            ["experiment=ppo_cartpole", "agent.normalize_advantages=maybe"],
            "agent.normalize_advantages: expected bool, got 'maybe'",
        ),
        (["seed=abc"], "seed: expected int, got 'abc'"),
        (["launcher=anakin", "launcher.num_seeds=1.5"], "launcher.num_seeds: expected int, got 1.5"),
    ],
    ids=["agent", "another-agent", "top-level", "launcher"],
)
def test_a_wrong_type_is_refused_in_one_line_before_anything_starts(overrides, line, tmp_path):
    run_directory = tmp_path / "run"
    result = run_train([*overrides, f"hydra.run.dir={run_directory}"], timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"Invalid configuration: {line}"]
    assert not run_directory.exists()


def scalar_fields(schema: type) -> dict[str, str]:
    """The fields of `schema` that hold a bool, an int or a float (or null), with that type's name."""
    resolved = hints(schema)
    found = {}
    for field in dataclasses.fields(schema):
        hint = resolved.get(field.name, field.type)
        kinds = [arg for arg in (typing.get_args(hint) or (hint,)) if arg is not type(None)]
        if len(kinds) == 1 and kinds[0] in (bool, int, float) and not field.name.startswith("_"):
            found[field.name] = kinds[0].__name__
    return found


def schemas() -> dict[str, type]:
    """Every schema a key is checked against, by the key it sits under: the agents' (which Hydra's
    composition checks), the factories' and launchers' and the run settings (rl/experiments/validation.py)."""
    register_schemas()
    found = {f"agent ({target})": schema for target, schema in stored_schemas("agent").items()}
    for path, options in FACTORY_OPTIONS.items():
        found[path] = checkable(path.rpartition(".")[2], options, {}, ())
    return {**found, "": RunSettings, "checkpoint": CheckpointSettings}


@pytest.mark.current
def test_every_typed_key_of_every_schema_is_refused_in_one_line_naming_its_type():
    """In process (no composition: milliseconds): each scalar field of each schema, given 'abc', is refused
    by the phrase the entry point prints, both where composition refuses it (an agent's schema: the error's
    node names the field) and where rl/experiments/validation.py does (`check_values`)."""
    refused = []
    for where, schema in schemas().items():
        for name, kind in scalar_fields(schema).items():
            if where.startswith("agent"):
                with pytest.raises(OmegaConfBaseException) as refusal:
                    OmegaConf.merge(OmegaConf.structured(schema), {name: "abc"})
                line = f"agent.{name}: {type_refusal(refusal.value)}"
                key = f"agent.{name}"
            else:
                key = f"{where}.{name}" if where else name
                with pytest.raises(ConfigError) as refusal:
                    check_values(where, schema, {name: "abc"})
                line = str(refusal.value)
            assert re.fullmatch(rf"{re.escape(key)}: expected \S*{kind}\S*( \| None)?, got 'abc'", line), line
            refused.append(key)
    assert len(refused) > 80, refused
