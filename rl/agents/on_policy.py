"""What the on-policy sequence agents (PPO, IMPALA) share.

Both learn from a bounded reverb queue of `unroll_length + 1`-row sequences written by
actors that store the behaviour policy's log-probabilities with each step, and both
learners serve `PolicyParams`, so one actor and one pair of policies serve both:

* `OnPolicyConfig`: the queue, optimisation and loss-weight settings both configs have.
* `SequenceQueueBuilder`: the queue table, `SequenceAdder`, `ExtrasActor` and the
  sampling / mode policies; an agent's builder adds only its learner.
* `PolicyParams`, the linear schedules, `stored_actions` and the masked means their
  learners and losses use.

Nothing here imports rlax, so configuration checks that only read a builder stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl import core
from rl.agents.actors import Policy
from rl.agents.builder import ActorLearnerBuilder, sequence_iterator
from rl.agents.normalization import RunningStatistics, normalize_observations
from rl.agents.configs import OnPolicyConfig
from rl.networks.base import FeedForwardNetwork
from rl.networks.policy_value import log_prob, policy_mode
from rl.policies import Sample
from rl.specs import EnvironmentSpec, is_discrete

if TYPE_CHECKING:  # Only a type here: importing it imports reverb (and TensorFlow).
    from rl.replay.sequences import SequenceStep

# --------------------------------------------------------------------------- config


# --------------------------------------------------------------------------- builder


def extras_spec(environment_spec: EnvironmentSpec) -> dict[str, Any]:
    """What an on-policy actor stores with each step: the behaviour log-probability and,
    for continuous actions, the raw Gaussian sample (the environment gets it clipped and
    rescaled, and only the raw sample's probability is the one stored)."""
    extras: dict[str, Any] = {"log_prob": specs.Array((), np.float32, "log_prob")}
    if not is_discrete(environment_spec.actions):
        extras["raw_action"] = specs.Array(environment_spec.actions.shape, np.float32, "raw_action")
    return extras


class SequenceQueueBuilder(ActorLearnerBuilder):
    """Actors write `unroll_length + 1`-row sequences (one every `unroll_length` steps per
    environment copy) into a reverb queue, and the learner trains on each once,
    `sequences_per_learner_step` sequences per learner step.

    Subclasses provide `make_learner`; their config is an `OnPolicyConfig` that also has
    `normalize_observations` and `observation_clip`, and their learner serves
    `PolicyParams` (parameters, observation statistics)."""

    # Discrete (categorical policy) or continuous (Gaussian policy) actions alike.
    action_kind = None
    network_kind = "policy_value"
    # Names the agent in messages.
    agent_name = "on-policy agent"

    def __init__(self, config: OnPolicyConfig, exploration: Any = None):
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
        return self.config.sequences_per_learner_step

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
        del environment_spec
        return sequence_iterator(replay_client, self.config.replay_table_name, self.samples_per_learner_step)

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
            network_params, statistics = params  # PolicyParams
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


# --------------------------------------------------------------------------- learning


class PolicyParams(NamedTuple):
    """What actors and evaluators fetch: the network's parameters and the observation
    statistics to normalise with (identity unless `normalize_observations`)."""

    params: Any
    observation_statistics: RunningStatistics


def no_statistics() -> RunningStatistics:
    """What a learner that does not normalise observations serves as statistics: none
    (the policies ignore them when normalize_observations is off)."""
    return RunningStatistics(jnp.zeros((), jnp.float32), (), ())


def schedule_fraction(config: OnPolicyConfig, actor_steps: jax.Array) -> jax.Array:
    """How far the linear schedules are: actor_steps / decay_actor_steps, in [0, 1]."""
    if config.decay_actor_steps <= 0:
        return jnp.zeros((), jnp.float32)
    return jnp.clip(actor_steps.astype(jnp.float32) / config.decay_actor_steps, 0.0, 1.0)


def scheduled(value: float, final_fraction: float, fraction: jax.Array) -> jax.Array:
    """`value` decayed linearly to `final_fraction * value` as `fraction` goes 0 -> 1."""
    return value * (1.0 - fraction * (1.0 - final_fraction))


def stored_actions(batch: SequenceStep) -> Any:
    """The actions whose probabilities the behaviour policy stored: the raw (unclipped,
    network-scale) sample when the actor kept one, the environment's action otherwise."""
    return batch.extras.get("raw_action", batch.action)


def steps_taken(batch: SequenceStep) -> jax.Array:
    """Actor steps in a batch of sequences (B, L): the rows with mask 1 but each
    sequence's last (it only bootstraps), as int32 for the schedules' clock."""
    return jnp.sum(batch.mask[:, :-1]).astype(jnp.int32)


# --------------------------------------------------------------------------- losses


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """sum(mask * values) / max(sum(mask), 1)."""
    return jnp.sum(mask * values) / jnp.maximum(jnp.sum(mask), 1.0)


def entropy_bonus(entropies: jax.Array, mask: jax.Array) -> jax.Array:
    """H = mean_t entropy(pi(.|o_t)); the loss subtracts entropy_cost * H."""
    return masked_mean(entropies, mask)
