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

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl import core
from rl.agents.actors import Policy
from rl.agents.builder import ActorLearnerBuilder, sequence_iterator
from rl.agents.normalization import RunningStatistics, normalize_observations
from rl.checks import require_positive
from rl.networks.base import FeedForwardNetwork
from rl.networks.policy_value import log_prob, policy_mode
from rl.policies import Sample
from rl.specs import EnvironmentSpec, is_discrete

if TYPE_CHECKING:  # Only a type here: importing it imports reverb (and TensorFlow).
    from rl.replay.sequences import SequenceStep

# --------------------------------------------------------------------------- config


def require_unit_interval(config: Any, *names: str) -> None:
    """Raises a ValueError naming the first field among `names` outside [0, 1]."""
    for name in names:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(config, name)}")


@dataclasses.dataclass
class OnPolicyConfig:
    """The settings PPO and IMPALA share (`agent.*`); each agent changes the defaults,
    not the meaning."""

    # How messages name `sequences_per_learner_step` (not a field).
    LEARNER_STEP_SEQUENCES: ClassVar[str] = "batch_size"

    # Steps per stored sequence: an item holds unroll_length + 1 rows, the last one only
    # bootstrapping the targets (consecutive items share it).
    unroll_length: int = 20
    # Sequences per batch the learner trains on.
    batch_size: int = 8
    # Items the queue holds before actors wait (null: two learner steps' worth). Each item
    # is trained on once; the bound is how far actors may run ahead of the learner.
    max_queue_size: int | None = None

    discount: float = 0.99
    learning_rate: float = 3e-4
    # Linear decay of the learning rate to final_learning_rate_fraction of it by this many
    # actor steps (counted as the steps the learner has trained on); conf/agent/<name>.yaml
    # sets it to the run's max_actor_steps. 0 keeps it constant.
    decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 1.0
    max_gradient_norm: float = 0.5
    value_cost: float = 0.5
    entropy_cost: float = 0.0
    # Actor steps between two fetches of the learner's parameters.
    variable_update_period: int = 1
    replay_table_name: str = "queue"

    def __post_init__(self) -> None:
        require_positive(
            self, "unroll_length", "batch_size", "learning_rate", "max_gradient_norm", "variable_update_period"
        )
        require_unit_interval(self, "discount", "final_learning_rate_fraction")
        for name in ("value_cost", "entropy_cost"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.decay_actor_steps < 0:
            raise ValueError(f"decay_actor_steps must be >= 0, got {self.decay_actor_steps}")
        if self.max_queue_size is not None and self.max_queue_size < self.sequences_per_learner_step:
            raise ValueError(
                f"max_queue_size ({self.max_queue_size}) must be >= {self.LEARNER_STEP_SEQUENCES} "
                f"({self.sequences_per_learner_step}): the learner could never sample a batch"
            )

    @property
    def sequences_per_learner_step(self) -> int:
        """Sequences one learner step takes from the queue."""
        return self.batch_size

    @property
    def queue_size(self) -> int:
        return self.max_queue_size if self.max_queue_size is not None else 2 * self.sequences_per_learner_step

    @property
    def sequence_length(self) -> int:
        return self.unroll_length + 1


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
