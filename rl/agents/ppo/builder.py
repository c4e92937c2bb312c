"""Builds PPO's queue, sequence adder, actor, learner and policies."""

from __future__ import annotations

from typing import Any, Iterator

import jax
import numpy as np
from dm_env import specs

from rl import core
from rl.agents.actors import Policy
from rl.agents.builder import ActorLearnerBuilder, builder_factory
from rl.agents.ppo.config import PPOConfig
from rl.agents.ppo.normalization import normalize_observations
from rl.counting import Counter
from rl.loggers.base import Logger
from rl.networks.base import FeedForwardNetwork
from rl.networks.policy_value import log_prob, policy_mode
from rl.policies import Sample
from rl.specs import EnvironmentSpec, is_discrete


def extras_spec(environment_spec: EnvironmentSpec) -> dict[str, Any]:
    """What a PPO actor stores with each step: the behaviour log-probability and, for
    continuous actions, the raw Gaussian sample (the environment gets it clipped and
    rescaled, and only the raw sample's probability is the one stored)."""
    extras: dict[str, Any] = {"log_prob": specs.Array((), np.float32, "log_prob")}
    if not is_discrete(environment_spec.actions):
        extras["raw_action"] = specs.Array(environment_spec.actions.shape, np.float32, "raw_action")
    return extras


class PPOBuilder(ActorLearnerBuilder):
    """PPO from a queue of sequences: actors write `unroll_length + 1`-row sequences
    (one every `unroll_length` steps per environment copy) into a reverb queue, and the
    learner trains on each once, `samples_per_learner_step` sequences per learner step.

    Everything but the learner is shared with IMPALA (`rl.agents.impala.IMPALABuilder`
    subclasses this): the config must provide `unroll_length`, `sequence_length`,
    `batch_size`, `queue_size`, `replay_table_name`, `variable_update_period`,
    `normalize_observations` and `observation_clip`, and the learner must serve
    `PolicyParams` (parameters, observation statistics)."""

    # Discrete (categorical policy) or continuous (Gaussian policy) actions alike.
    action_kind = None
    network_kind = "policy_value"
    # Names the agent in messages (IMPALABuilder reuses everything here but the learner).
    agent_name = "ppo"

    def __init__(self, config: PPOConfig, exploration: Any = None):
        exploration = Sample() if exploration is None else exploration
        if not isinstance(exploration, Sample):
            raise ValueError(
                f"{self.agent_name} acts with samples of its own policy and learns from their probabilities: use policy=sample, "
                f"not {type(exploration).__name__}"
            )
        self.config = config
        self.exploration = exploration

    @property
    def replay_ratio(self) -> Any:
        from rl.replay.queue import QueueRatio

        return QueueRatio(self.samples_per_learner_step, self.config.queue_size)

    @property
    def samples_per_learner_step(self) -> int:
        return self.config.batch_size

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        from rl.replay.queue import make_queue_table
        from rl.replay.sequences import sequence_signature

        signature = sequence_signature(environment_spec, self.config.sequence_length, extras_spec(environment_spec))
        return [make_queue_table(self.config.replay_table_name, self.config.queue_size, signature)]

    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        from rl.replay.sequences import SequenceAdder, step_spec

        return SequenceAdder(
            replay_client,
            self.config.replay_table_name,
            step_spec(environment_spec, extras_spec(environment_spec)),
            sequence_length=self.config.sequence_length,
            period=self.config.unroll_length,
        )

    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        from rl.replay.dataset import make_replay_iterator
        from rl.replay.sequences import decode_sequences

        del environment_spec
        return make_replay_iterator(
            replay_client.server_address,
            self.config.replay_table_name,
            self.samples_per_learner_step,
            decode=decode_sequences,
        )

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """`(params, key, observations, step) -> (actions, extras)`: a sample and its
        log-probability (behaviour), or the mode and no extras (evaluation)."""
        action_spec = environment_spec.actions
        discrete = is_discrete(action_spec)
        head = self.exploration
        if not discrete:
            from rl.agents.continuous import action_bounds, to_environment_scale

            action_bounds(action_spec)  # Refuse unbounded actions before anything runs.

        normalize, clip = self.config.normalize_observations, self.config.observation_clip

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
            network_params, statistics = params  # PPOLearner.policy_params
            if normalize:
                observations = normalize_observations(statistics, observations, clip)
            output, _ = networks.apply(network_params, observations)
            if evaluation:
                action, extras = policy_mode(output), {}
            else:
                action = head(output, key, step)
                extras = {"log_prob": log_prob(output, action)}
                if not discrete:
                    extras["raw_action"] = action
            if not discrete:
                action = to_environment_scale(action, action_spec)
            return action, extras

        return policy

    def make_actor(
        self,
        random_key: jax.Array,
        policy: Policy,
        environment_spec: EnvironmentSpec,
        variable_source: core.VariableSource,
        adder: Any = None,
    ) -> core.Actor:
        from rl.agents.actors import ExtrasActor
        from rl.variables import VariableClient

        dtype = np.int32 if is_discrete(environment_spec.actions) else np.float32
        client = VariableClient(variable_source, "policy", self.config.variable_update_period)
        return ExtrasActor(policy, random_key, client, adder, action_dtype=dtype)

    def make_learner(
        self,
        random_key: jax.Array,
        networks: FeedForwardNetwork,
        dataset: Iterator[Any],
        replay_client: Any,
        counter: Counter,
        logger: Logger,
    ) -> core.Learner:
        from rl.agents.ppo.learning import PPOLearner

        del replay_client  # A queue: nothing to write back.
        if self.config.normalize_observations and getattr(networks, "observation_spec", None) is None:
            raise ValueError("normalize_observations needs a network that names its observation spec (policy_value_mlp)")
        return PPOLearner(networks, random_key, dataset, self.config, networks.observation_spec, counter, logger)


make_builder = builder_factory(PPOBuilder, PPOConfig)
