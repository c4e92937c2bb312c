"""Extending a run (rl/experiments/extension.py): which settings follow max_actor_steps, what `extend=keep` and
`extend=stretch` make of them, the one-line refusals, and how the extension becomes the run's own (its `.hydra/`
files), checked on configurations composed from conf/ and run directories made by hand. The end-to-end
extension of a finished run is in tests/test_resume.py (reverb) and tests/test_anakin.py."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import ROOT
from rl.experiments.extension import Extension, derived_settings, extend_config, find_extension, record
from rl.checkpointing import CheckpointError
from rl.experiments.resume import check_same_config, prepare_run
from rl.experiments.validation import ConfigError

# The same code on both stacks: run once (pytest.ini).
pytestmark = pytest.mark.current


def composed(*overrides: str):
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def finished_run(tmp_path, *overrides: str) -> str:
    """A run directory as a finished run leaves it, as far as extending reads it: `.hydra/` and summary.json."""
    run_directory = str(tmp_path / "run")
    os.makedirs(os.path.join(run_directory, ".hydra"))
    OmegaConf.save(composed(*overrides), os.path.join(run_directory, ".hydra", "config.yaml"))
    with open(os.path.join(run_directory, ".hydra", "overrides.yaml"), "w") as file:
        yaml.safe_dump(list(overrides), file)
    with open(os.path.join(run_directory, "summary.json"), "w") as file:
        json.dump({"status": "finished", "actor_steps": 800}, file)
    return run_directory


@pytest.mark.parametrize(
    ("overrides", "derived"),
    [
        (["agent=dqn"], ["policy.run_steps", "agent.learning_rate_decay_actor_steps"]),
        (["agent=r2d2"], ["policy.run_steps", "agent.learning_rate_decay_actor_steps"]),
        (["agent=pqn"], ["policy.run_steps", "agent.decay_actor_steps"]),
        (["agent=ppo"], ["agent.decay_actor_steps"]),
        (["agent=impala"], ["agent.decay_actor_steps"]),
        (["agent=sac"], []),
        (["experiment=dqn_cartpole"], ["policy.run_steps", "agent.learning_rate_decay_actor_steps"]),
        (["experiment=ppo_gymnax_cartpole"], ["agent.decay_actor_steps"]),
    ],
)
def test_the_settings_that_follow_max_actor_steps_are_found_with_their_values_both_ways(overrides, derived):
    horizon, stretched = derived_settings(composed(*overrides, "max_actor_steps=800"), 1600)
    assert list(horizon) == derived
    assert horizon == dict.fromkeys(derived, 800)
    assert stretched == dict.fromkeys(derived, 1600)


def test_a_setting_derived_by_an_expression_is_found_too(tmp_path):
    saved = OmegaConf.create({"max_actor_steps": 800, "agent": {"warmup": "${oc.select:max_actor_steps}"}})
    assert derived_settings(saved, 1600) == ({"agent.warmup": 800}, {"agent.warmup": 1600})


def test_keep_sets_the_derived_settings_to_the_runs_own_and_stretch_to_the_new_budget(tmp_path):
    run_directory = finished_run(tmp_path, "max_actor_steps=800")
    kept = composed("max_actor_steps=1600", "extend=keep")
    extension = extend_config(kept, run_directory)
    assert (extension.before, extension.after, extension.choice) == (800, 1600, "keep")
    assert (kept.max_actor_steps, kept.agent.learning_rate_decay_actor_steps, kept.policy.run_steps) == (1600, 800, 800)
    check_same_config(kept, run_directory, extension)  # The run's own config but for the budget.
    stretched = composed("max_actor_steps=1600", "extend=stretch")
    extension = extend_config(stretched, run_directory)
    assert extension.choice == "stretch"
    assert (stretched.agent.learning_rate_decay_actor_steps, stretched.policy.run_steps) == (1600, 1600)
    check_same_config(stretched, run_directory, extension)


def test_a_setting_pinned_by_the_run_itself_is_not_derived(tmp_path):
    run_directory = finished_run(tmp_path, "max_actor_steps=800", "agent.learning_rate_decay_actor_steps=500")
    config = composed("max_actor_steps=1600", "agent.learning_rate_decay_actor_steps=500", "extend=stretch")
    extension = extend_config(config, run_directory)
    assert extension.horizon == {"policy.run_steps": 800}
    assert config.agent.learning_rate_decay_actor_steps == 500


def test_the_same_budget_is_no_extension_and_a_new_directory_none_either(tmp_path):
    run_directory = finished_run(tmp_path, "max_actor_steps=800")
    assert find_extension(composed("max_actor_steps=800"), run_directory) is None
    assert find_extension(composed("max_actor_steps=1600"), str(tmp_path / "new")) is None


def test_without_a_choice_an_extension_with_schedules_is_refused_in_one_line_naming_both(tmp_path):
    run_directory = finished_run(tmp_path, "max_actor_steps=800")
    with pytest.raises(ConfigError) as refusal:
        find_extension(composed("max_actor_steps=1600"), run_directory)
    assert str(refusal.value) == (
        f"extend: the run in {run_directory} is extended from 800 to 1600 actor steps and policy.run_steps, "
        "agent.learning_rate_decay_actor_steps follow max_actor_steps: add extend=keep (they keep their horizon, "
        "800: the schedules stay where they ended) or extend=stretch (they stretch to 1600)"
    )


def test_without_a_schedule_no_choice_is_needed(tmp_path):
    run_directory = finished_run(tmp_path, "agent=sac", "environment=pendulum", "max_actor_steps=800")
    extension = find_extension(composed("agent=sac", "environment=pendulum", "max_actor_steps=1600"), run_directory)
    assert extension.horizon == {}
    assert extension.describe() == f"Extending the run in {run_directory} from 800 to 1600 actor steps; " + (
        "no setting follows max_actor_steps"
    )


def test_a_shorter_budget_and_an_unknown_choice_are_refused(tmp_path):
    run_directory = finished_run(tmp_path, "max_actor_steps=800")
    with pytest.raises(ConfigError, match="^max_actor_steps: is 400 but the run in .* used 800; a resumed run can"):
        find_extension(composed("max_actor_steps=400", "extend=keep"), run_directory)
    with pytest.raises(ConfigError, match="^extend: is 'longer'; a resumed run given a larger max_actor_steps"):
        find_extension(composed("max_actor_steps=1600", "extend=longer"), str(tmp_path / "new"))


def test_the_choice_is_said_in_one_line():
    extension = Extension("/runs/a", 800, 1600, "keep", {"policy.run_steps": 800}, {"policy.run_steps": 1600})
    assert extension.describe() == (
        "Extending the run in /runs/a from 800 to 1600 actor steps; its schedules keep their horizon "
        "(policy.run_steps=800; extend=stretch stretches them)"
    )
    stretched = Extension("/runs/a", 800, 1600, "stretch", {"policy.run_steps": 800}, {"policy.run_steps": 1600})
    assert stretched.describe() == (
        "Extending the run in /runs/a from 800 to 1600 actor steps; its schedules stretch "
        "(policy.run_steps 800 -> 1600; extend=keep keeps them)"
    )


@pytest.mark.parametrize("choice", ["keep", "stretch"])
def test_the_recorded_extension_is_the_runs_own_config_for_a_later_resume(tmp_path, choice):
    run_directory = finished_run(tmp_path, "seed=3", "max_actor_steps=800")
    extension = find_extension(composed("seed=3", "max_actor_steps=1600", f"extend={choice}"), run_directory)
    record(extension, session=1)
    with open(os.path.join(run_directory, ".hydra", "overrides.yaml")) as file:
        overrides = yaml.safe_load(file)
    pins = ["policy.run_steps=800", "agent.learning_rate_decay_actor_steps=800"] if choice == "keep" else []
    assert overrides == ["seed=3", "max_actor_steps=1600", *pins]
    again = composed(*overrides)  # What `resume=DIR` alone composes now.
    assert find_extension(again, run_directory) is None
    check_same_config(again, run_directory)
    expected = 800 if choice == "keep" else 1600
    assert (again.agent.learning_rate_decay_actor_steps, again.policy.run_steps) == (expected, expected)
    # The run is no longer finished; its old summary is set aside.
    assert not os.path.exists(os.path.join(run_directory, "summary.json"))
    with open(os.path.join(run_directory, "logs", "superseded", "summary.session1.json")) as file:
        assert json.load(file)["status"] == "finished"


@pytest.mark.parametrize(("launcher", "kept"), [("anakin", {"agent.max_replay_size": 800}), ("local", {})])
def test_a_replay_buffer_in_the_learner_state_keeps_its_size_whatever_the_choice(tmp_path, launcher, kept):
    """Under anakin (and sebulba) the buffer is min(agent.max_replay_size, max_actor_steps) places of the learner
    state: the checkpoint's is restored at its size. A reverb table's size never followed the budget."""
    run_directory = finished_run(tmp_path, f"launcher={launcher}", "max_actor_steps=800")
    for choice in ("keep", "stretch"):
        config = composed(f"launcher={launcher}", "max_actor_steps=1600", f"extend={choice}")
        extension = extend_config(config, run_directory)
        assert extension.fixed == kept
        assert config.agent.max_replay_size == kept.get("agent.max_replay_size", 100_000)  # dqn.yaml's
        check_same_config(config, run_directory, find_extension(config, run_directory))


def test_a_buffer_smaller_than_the_run_is_left_alone(tmp_path):
    run_directory = finished_run(tmp_path, "launcher=anakin", "agent.max_replay_size=500", "max_actor_steps=800")
    config = composed("launcher=anakin", "agent.max_replay_size=500", "max_actor_steps=1600", "extend=keep")
    assert extend_config(config, run_directory).fixed == {}


def test_a_derived_setting_given_on_the_command_line_is_refused_naming_both_values(tmp_path):
    run_directory = finished_run(tmp_path, "max_actor_steps=800")
    config = composed("max_actor_steps=1600", "extend=keep", "agent.learning_rate_decay_actor_steps=1200")
    with pytest.raises(ConfigError) as refusal:
        extend_config(config, run_directory)
    assert str(refusal.value) == (
        "agent.learning_rate_decay_actor_steps: follows max_actor_steps, so an extension sets it: extend=keep (800) "
        "or extend=stretch (1600); drop it from the command line"
    )


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        ("pruned", ConfigError, "max_actor_steps: the run in .* was pruned by its search and is not extended"),
        ("finished", CheckpointError, "no checkpoint to extend in .*checkpoints \\(the run ran with checkpoint"),
    ],
)
def test_a_pruned_run_or_one_without_a_checkpoint_is_not_extended(tmp_path, status, error, message):
    run_directory = finished_run(tmp_path, "max_actor_steps=800")
    with open(os.path.join(run_directory, "summary.json"), "w") as file:
        json.dump({"status": status, "actor_steps": 800}, file)
    config = composed("max_actor_steps=1600", "extend=keep")
    extend_config(config, run_directory)  # As rl/train.py does before building the experiment.
    with pytest.raises(error, match=message):
        prepare_run(None, config, run_directory)  # Refused before the experiment is needed.
