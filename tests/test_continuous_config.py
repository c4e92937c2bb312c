"""Continuous-control options: the agent yaml picks its network and policy, the command line
wins, presets fix recognisable budgets, and discrete-action agents refuse these options."""

import os

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, stack_marks
from rl.experiments.make_experiment import make_experiment
from rl.experiments.validation import ConfigError
from rl.policies import Deterministic, GaussianNoise, Stochastic

CONF = os.path.join(ROOT, "conf")


def compose_config(overrides):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=False)


def build(overrides, tmp_path):
    choices = {o.split("=")[0]: o.split("=")[1] for o in overrides if "." not in o.split("=")[0]}
    return make_experiment(compose_config(overrides), str(tmp_path), choices)


@pytest.mark.parametrize("agent,policy_class", [("sac", Stochastic), ("td3", GaussianNoise), ("d4pg", GaussianNoise)])
def test_agent_picks_its_network_and_policy(agent, policy_class, tmp_path):
    config = compose_config([f"agent={agent}", "environment=pendulum"])
    assert config.network._target_ == "rl.networks.make_actor_critic_networks"
    experiment, _ = build([f"agent={agent}", "environment=pendulum"], tmp_path)
    assert isinstance(experiment.builder.exploration, policy_class)
    assert experiment.builder.action_kind == "continuous"


def test_command_line_overrides_the_agents_policy(tmp_path):
    experiment, _ = build(["agent=sac", "environment=pendulum", "policy=deterministic"], tmp_path)
    assert isinstance(experiment.builder.exploration, Deterministic)


@pytest.mark.parametrize(
    "overrides,key",
    [
        pytest.param(overrides, key, id=f"{' '.join(overrides)}-{key}", marks=stack_marks(overrides))
        for overrides, key in [
            (["environment=mujoco"], "agent"),
            (["environment=dm_control"], "agent"),
            (["policy=gaussian_noise"], "policy"),
            (["policy=stochastic"], "policy"),
            (["network=actor_critic_mlp"], "network"),
            (["agent=sac"], "agent"),
            (["agent=td3", "environment=pendulum", "network=mlp"], "network"),
            (["agent=td3", "environment=pendulum", "policy=stochastic"], "agent"),
            (["agent=sac", "environment=mujoco", "environment.name=CartPole-v1"], "environment.name"),
            (["agent=sac", "environment=dm_control", "environment.task=fly"], "environment.name"),
            (["agent=d4pg", "environment=pendulum", "agent.v_min=10.0", "agent.v_max=0.0"], "agent"),
        ]
    ],
)
def test_incompatible_continuous_options_are_refused(overrides, key, tmp_path):
    with pytest.raises(ConfigError) as error:
        build(overrides, tmp_path)
    assert error.value.key == key


@pytest.mark.parametrize(
    "preset,environment,steps",
    [
        pytest.param(preset, environment, steps, marks=stack_marks([f"experiment={preset}"]))
        for preset, environment, steps in [
            ("sac_pendulum", "Pendulum-v1", 30_000),
            ("td3_pendulum", "Pendulum-v1", 30_000),
            ("d4pg_pendulum", "Pendulum-v1", 30_000),
            ("sac_halfcheetah", "HalfCheetah-v5", 1_000_000),
            ("td3_halfcheetah", "HalfCheetah-v5", 1_000_000),
            ("d4pg_halfcheetah", "HalfCheetah-v5", 1_000_000),
            ("sac_dmc_cheetah_run", "cheetah-run", 1_000_000),
        ]
    ],
)
def test_presets_fix_environment_and_budget(preset, environment, steps, tmp_path):
    experiment, _ = build([f"experiment={preset}"], tmp_path)
    assert experiment.environment_name == environment
    assert experiment.max_actor_steps == steps
    assert experiment.agent_name == preset.split("_")[0]
    shortened, _ = build([f"experiment={preset}", "max_actor_steps=500"], tmp_path)
    assert shortened.max_actor_steps == 500


@pytest.mark.reverb  # MuJoCo.
def test_td3_halfcheetah_warms_up_with_uniform_actions(tmp_path):
    experiment, _ = build(["experiment=td3_halfcheetah"], tmp_path)
    assert experiment.builder.exploration == GaussianNoise(sigma=0.1, warmup_steps=25_000)
