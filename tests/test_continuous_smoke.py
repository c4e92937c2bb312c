"""Every MuJoCo and dm_control option builds, acts and learns for a few hundred steps.

The runs go through the same path as scripts/train.py (compose, make_experiment, the
launcher=local main) in this process, so the many short runs share one TensorFlow/JAX
start-up.
"""

import math
import os

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, read_summary
from rl.experiments.make_experiment import make_experiment

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

CONF = os.path.join(ROOT, "conf")
SHORT = [
    "max_actor_steps=300",
    "eval_every=300",
    "eval_episodes=1",
    "progress=false",
    "logger=csv",
    "checkpoint=false",
    "environment.max_episode_steps=100",
    "agent.min_replay_size=100",
    "agent.batch_size=32",
    "agent.samples_per_insert=32.0",
    "agent.sgd_steps_per_learner_step=2",
]
SMALL_NETWORK = ["network.policy_hidden_sizes=[32,32]", "network.critic_hidden_sizes=[32,32]"]

CASES = {
    # The presets, shortened.
    "sac_halfcheetah": ["experiment=sac_halfcheetah", "policy.warmup_steps=100"],
    "td3_halfcheetah": ["experiment=td3_halfcheetah", "policy.warmup_steps=100"],
    "d4pg_halfcheetah": ["experiment=d4pg_halfcheetah"],
    "sac_dmc_cheetah_run": ["experiment=sac_dmc_cheetah_run", "policy.warmup_steps=100"],
    # The other MuJoCo tasks and dm_control tasks, spread over the agents.
    "td3_hopper": ["agent=td3", "environment=mujoco", "environment.name=Hopper-v5", *SMALL_NETWORK],
    "d4pg_walker2d": ["agent=d4pg", "environment=mujoco", "environment.name=Walker2d-v5", *SMALL_NETWORK],
    "sac_ant": ["agent=sac", "environment=mujoco", "environment.name=Ant-v5", *SMALL_NETWORK],
    # Observations normalised by the learner's statistics, served to the actors with the policy's parameters.
    "sac_hopper_normalised": [
        "agent=sac",
        "environment=mujoco",
        "environment.name=Hopper-v5",
        "agent.normalize_observations=true",
        *SMALL_NETWORK,
    ],
    "td3_humanoid": ["agent=td3", "environment=mujoco", "environment.name=Humanoid-v5", *SMALL_NETWORK],
    "td3_walker_walk": [
        "agent=td3",
        "environment=dm_control",
        "environment.domain=walker",
        "environment.task=walk",
        *SMALL_NETWORK,
    ],
    "d4pg_cartpole_swingup": [
        "agent=d4pg",
        "environment=dm_control",
        "environment.domain=cartpole",
        "environment.task=swingup",
        "network.layer_norm=true",
        *SMALL_NETWORK,
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_builds_acts_and_learns(name, tmp_path):
    overrides = [*CASES[name], *SHORT]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides, return_hydra_config=False)
    choices = {o.split("=")[0]: o.split("=")[1] for o in overrides if "." not in o.split("=")[0]}
    experiment, launch = make_experiment(config, str(tmp_path), choices)
    summary = launch(experiment=experiment)
    assert summary.actor_steps == 300
    assert summary.learner_steps >= 50  # 200 inserts past min_replay_size, 64 samples per step.
    assert math.isfinite(summary.final_eval_return)
    assert [steps for steps, _ in summary.eval_returns] == [0, 300]  # The untrained policy's round, then the end.
    assert summary.eval_returns[-1] == (300, summary.final_eval_return)
    assert read_summary(str(tmp_path))["agent"] == name.split("_")[0]
