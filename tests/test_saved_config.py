"""A run's saved configuration read by this version (rl/experiments/saved_config.py): classes that moved since the
run was written (`RENAMED_TARGETS`: the launchers now in rl/local/ and rl/ray/) are read under their new names,
and nothing else changes. Evaluating and resuming such a run end to end is in tests/test_evaluate.py and
tests/test_resume.py (reverb)."""

from __future__ import annotations

import importlib
import os

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

from conftest import ROOT
from rl.checkpointing import CheckpointError
from rl.experiments.launcher import Launcher
from rl.experiments.saved_config import RENAMED_TARGETS, read_saved_config, saved_config_path, with_current_targets

# The same code on both stacks: run once (pytest.ini).
pytestmark = pytest.mark.current

OLD_LOCAL = "rl.experiments.launchers.local.LocalLauncher"


def composed(*overrides: str):
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def saved_run(tmp_path, config) -> str:
    run_directory = str(tmp_path / "run")
    os.makedirs(os.path.join(run_directory, ".hydra"))
    OmegaConf.save(config, saved_config_path(run_directory))
    return run_directory


@pytest.mark.parametrize("option", ["local", "ray"])
def test_each_launcher_s_config_names_the_new_name_of_its_old_target(option):
    target = composed(f"launcher={option}").launcher._target_
    (old,) = [old for old, new in RENAMED_TARGETS.items() if new == target]
    assert issubclass(get_class(target), Launcher)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old.rsplit(".", 1)[0])  # The old module is gone: only the table reads it.


def test_renamed_targets_get_their_new_names_at_any_depth_and_nothing_else_changes():
    saved = OmegaConf.create(
        {
            "max_actor_steps": 800,
            "launcher": {"_target_": OLD_LOCAL, "deterministic": False},
            "nested": {"list": [{"_target_": "rl.experiments.launchers.ray.RayLauncher"}, {"_target_": "rl.other.X"}]},
            "agent": {"decay": "${max_actor_steps}", "directory": "${hydra:runtime.output_dir}", "size": "???"},
        }
    )
    current = with_current_targets(saved)
    assert current.launcher._target_ == "rl.local.LocalLauncher"
    assert [entry._target_ for entry in current.nested.list] == ["rl.ray.RayLauncher", "rl.other.X"]
    assert OmegaConf.to_container(current.agent, resolve=False) == OmegaConf.to_container(saved.agent, resolve=False)
    assert current.agent.decay == 800 and OmegaConf.is_missing(current.agent, "size")  # Still interpolations.
    assert saved.launcher._target_ == OLD_LOCAL  # The config read is left as it was.


def test_a_run_saved_with_an_old_launcher_target_reads_with_the_new_one_and_its_file_is_untouched(tmp_path):
    config = composed("launcher=local", "max_actor_steps=800")
    config.launcher._target_ = OLD_LOCAL
    run_directory = saved_run(tmp_path, config)
    with open(saved_config_path(run_directory)) as file:
        written = file.read()
    read = read_saved_config(run_directory)
    assert get_class(read.launcher._target_).__name__ == "LocalLauncher"
    config.launcher._target_ = "rl.local.LocalLauncher"
    assert OmegaConf.to_container(read, resolve=False) == OmegaConf.to_container(config, resolve=False)
    with open(saved_config_path(run_directory)) as file:
        assert file.read() == written


def test_no_saved_config_is_none_and_an_unreadable_one_is_an_error_naming_it(tmp_path):
    assert read_saved_config(str(tmp_path)) is None
    os.makedirs(tmp_path / ".hydra")
    (tmp_path / ".hydra" / "config.yaml").write_text("launcher: {_target_: [unclosed\n")
    with pytest.raises(CheckpointError, match=f"cannot read the run's configuration {tmp_path}/.hydra/config.yaml"):
        read_saved_config(str(tmp_path))
