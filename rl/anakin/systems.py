"""Builds the anakin system of an experiment's agent, with its environment copies."""

from __future__ import annotations

from rl.anakin.checks import anakin_kind
from rl.environments.gymnax_vector import GymnaxVector
from rl.experiments.config import ExperimentConfig


def gymnax_vector(experiment: ExperimentConfig, num_envs: int) -> GymnaxVector:
    """`num_envs` copies of the experiment's gymnax environment (name and kwargs from
    its factory)."""
    options = experiment.environment_factory.keywords
    return GymnaxVector(options["name"], num_envs, options.get("kwargs"))


def make_system(experiment: ExperimentConfig) -> tuple[object, GymnaxVector]:
    """(system, evaluation environment: eval_episodes copies), as the agent's builder says
    it compiles (`anakin`: rl/anakin/ppo.py or rl/anakin/off_policy.py)."""
    spec = experiment.environment_spec
    network = experiment.network_factory(environment_spec=spec)
    environment = gymnax_vector(experiment, experiment.num_envs)
    evaluation = gymnax_vector(experiment, experiment.eval_episodes)
    if anakin_kind(experiment) == "on_policy":
        from rl.anakin.ppo import PPOSystem

        return PPOSystem(experiment.builder, network, environment, spec), evaluation
    from rl.anakin.off_policy import make_off_policy_system

    system = make_off_policy_system(experiment.builder, network, environment, spec, experiment.max_actor_steps)
    return system, evaluation
