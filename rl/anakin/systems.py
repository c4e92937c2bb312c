"""Builds the anakin system of an experiment's agent, with its environment copies."""

from __future__ import annotations

from rl.anakin.checks import agent_of
from rl.environments.gymnax_vector import GymnaxVector
from rl.experiments.config import ExperimentConfig


def gymnax_vector(experiment: ExperimentConfig, num_envs: int) -> GymnaxVector:
    """`num_envs` copies of the experiment's gymnax environment (name and kwargs from
    its factory)."""
    options = experiment.environment_factory.keywords
    return GymnaxVector(options["name"], num_envs, options.get("kwargs"))


def make_system(experiment: ExperimentConfig) -> tuple[object, GymnaxVector]:
    """(system, evaluation environment: eval_episodes copies)."""
    spec = experiment.environment_spec
    network = experiment.network_factory(environment_spec=spec)
    environment = gymnax_vector(experiment, experiment.num_envs)
    evaluation = gymnax_vector(experiment, experiment.eval_episodes)
    agent = agent_of(experiment)
    if agent == "ppo":
        from rl.anakin.ppo import PPOSystem

        return PPOSystem(experiment.builder, network, environment, spec), evaluation
    from rl.anakin.off_policy import make_off_policy_system

    if agent == "sac":
        from rl.anakin.sac import SACFunctions as Functions
    else:
        from rl.anakin.dqn import DQNFunctions as Functions
    learner = Functions(experiment.builder, network)
    system = make_off_policy_system(learner, experiment.builder, network, environment, spec, experiment.max_actor_steps)
    return system, evaluation
