"""Every `_target_` in conf/ is checked against a dataclass schema (rl/experiments/schemas.py), and a
declared schema names exactly the options its factory takes from the configuration."""

import dataclasses
import inspect
import os
import pkgutil
import typing

import pytest
from omegaconf import OmegaConf

from conftest import ROOT
from rl.experiments.make_experiment import RUNTIME_ARGUMENTS
from rl.experiments.schemas import FACTORY_OPTIONS, omegaconf_type, options_schema

# Runs once, in the current stack's part: its subject (text, config schemas) is the same on both stacks.
pytestmark = pytest.mark.current

GROUPS = ["environment", "network", "policy", "logger", "agent", "launcher", "observers"]
OPTIONS = [
    (group, name[:-5])
    for group in GROUPS
    for name in sorted(os.listdir(os.path.join(ROOT, "conf", group)))
    if name.endswith(".yaml")
]


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_target_has_a_schema(group, option):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        overrides = [f"+{group}=[{option}]" if group == "observers" else f"{group}={option}"]
        config = compose(config_name="config", overrides=overrides)
    node = config[group][option] if group == "observers" else config[group]
    path = node["_target_"]
    runtime = RUNTIME_ARGUMENTS.get(group, ())
    schema = options_schema(group, path, pkgutil.resolve_name(path), runtime)
    assert schema is not None, f"conf/{group}/{option}.yaml: no schema for {path}"
    names = {field.name for field in dataclasses.fields(schema)}
    given = {key for key in OmegaConf.to_container(node) if not key.startswith("_")} - {"num_envs", "backend"}
    assert given <= names, f"conf/{group}/{option}.yaml sets {given - names}, which its schema lacks"


@pytest.mark.parametrize("path", sorted(FACTORY_OPTIONS))
def test_a_declared_schema_names_the_factorys_options(path):
    target = pkgutil.resolve_name(path)
    group = "environment" if ".environments." in path else "launcher" if "Launcher" in path else "network"
    parameters = inspect.signature(target).parameters.values()
    taken = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    declared = FACTORY_OPTIONS[path]
    assert set(declared) == taken - set(RUNTIME_ARGUMENTS.get(group, ()))
    hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    for name, hint in declared.items():  # The type the factory declares, as OmegaConf checks it.
        assert omegaconf_type(hint) == omegaconf_type(hints[name]), name
