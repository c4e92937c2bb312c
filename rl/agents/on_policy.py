"""What the agents learning from a queue of sequences (PPO, IMPALA, PQN) share: `SequenceQueueBuilder`, running
observation statistics, linear schedules and masked means. Imports neither rlax nor reverb."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from rl.systems.base import Policy
from rl.agents.builder import ActorLearnerBuilder
from rl.agents.configs import OnPolicyConfig, SequenceQueueConfig
from rl.agents.normalisation import RunningStatistics, normalize_observations
from rl.networks.base import FeedForwardNetwork, NetworkKind, log_prob, policy_mode
from rl.policies import Sample
from rl.replay.kinds import Queue
from rl.core import EnvironmentSpec, is_discrete

if TYPE_CHECKING:
    from rl.replay.adders import SequenceStep


# The metrics closest to the loss, closest first (`Learning.loss_terms`).
LOSS_TERMS = ("loss", "policy_loss", "value_loss")


def row_gatherer(tree: Any) -> Callable[[jax.Array], Any]:
    """`gather(order)`: `tree` at the rows `order` exactly (`leaf[order]` for every leaf, one leading axis).
    The 32-bit and bool leaves sit side by side as one matrix of 32-bit words, gathered at once: an accelerator
    gathers a contiguous row about as fast as a scalar, so one gather of packed rows replaces a gather of
    scalars per leaf. Other leaves (uint8 frames, already contiguous rows) are gathered each on its own."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    count = leaves[0].shape[0]
    packed = [leaf.dtype == jnp.bool_ or jnp.dtype(leaf.dtype).itemsize == 4 for leaf in leaves]
    columns = []
    for leaf in (leaf for leaf, pack in zip(leaves, packed) if pack):
        flat = jnp.reshape(leaf, (count, -1))
        words = flat.astype(jnp.uint32) if leaf.dtype == jnp.bool_ else jax.lax.bitcast_convert_type(flat, jnp.uint32)
        columns.append(words)
    rows = jnp.concatenate(columns, axis=1) if columns else None
    ends = np.cumsum([column.shape[1] for column in columns])[:-1]

    def gather(order: jax.Array) -> Any:
        words = iter(jnp.split(rows[order], ends, axis=-1)) if rows is not None else iter(())
        gathered = []
        for leaf, pack in zip(leaves, packed):
            if not pack:
                gathered.append(leaf[order])
                continue
            value = next(words)
            value = (
                value.astype(jnp.bool_) if leaf.dtype == jnp.bool_ else jax.lax.bitcast_convert_type(value, leaf.dtype)
            )
            gathered.append(jnp.reshape(value, order.shape + leaf.shape[1:]))
        return jax.tree_util.tree_unflatten(treedef, gathered)

    return gather


class PolicyParams(NamedTuple):
    """What actors fetch: the parameters and the observation statistics."""

    params: Any
    observation_statistics: RunningStatistics


class SequenceQueueBuilder(ActorLearnerBuilder):
    """Actors write `unroll_length + 1`-row sequences (one every `unroll_length` steps per
    copy) into a queue; the learner trains on each once. Subclasses provide `make_learning`."""

    action_kind = None
    network_kind = NetworkKind.POLICY_VALUE
    replay_kind = Queue
    default_exploration = Sample

    def __init__(self, config: OnPolicyConfig, exploration: Any = None):
        super().__init__(config, exploration)
        if not isinstance(self.exploration, Sample):
            name = type(self).__name__.removesuffix("Builder").lower()
            raise ValueError(
                f"{name} acts with samples of its own policy and learns from their probabilities: use policy=sample, "
                f"not {type(self.exploration).__name__}"
            )

    def extras_spec(self, environment_spec: EnvironmentSpec) -> dict[str, Any]:
        """The behaviour log-probability and, for continuous actions, the raw Gaussian sample."""
        extras: dict[str, Any] = {"log_prob": specs.Array((), np.float32, "log_prob")}
        if not is_discrete(environment_spec.actions):
            extras["raw_action"] = specs.Array(environment_spec.actions.shape, np.float32, "raw_action")
        return extras

    def observation_clip(self) -> float | None:
        """Where the policy normalises observations by the learner's statistics, the bound it clips them to
        (None: it acts on raw observations, as IMPALA does)."""
        return None

    def make_policy(self, networks: FeedForwardNetwork, environment_spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """`(params, key, observations, step) -> (actions, extras)`: a sample and its
        log-probability, or when evaluating the mode and no extras."""
        action_spec = environment_spec.actions
        discrete = is_discrete(action_spec)
        if not discrete:
            from rl.agents.continuous import action_bounds, to_environment_scale

            action_bounds(action_spec)  # Refuse unbounded actions before anything runs.

        clip = self.observation_clip()

        def policy(params: Any, key: jax.Array, observations: Any, step: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
            network_params, statistics = params  # PolicyParams
            if clip is not None:
                observations = normalize_observations(statistics, observations, clip)
            output, _ = networks.apply(network_params, observations)
            if evaluation:
                action = policy_mode(output)
                extras = {}
            else:
                action = self.exploration(output, key, step)
                extras = {"log_prob": log_prob(output, action)}
                if not discrete:
                    extras["raw_action"] = action
            if not discrete:
                action = to_environment_scale(action, action_spec)
            return action, extras

        return policy


def scheduled(config: SequenceQueueConfig, actor_steps: jax.Array, value: float, final_fraction: float) -> jax.Array:
    """`value` decayed linearly to `final_fraction * value` by `config.decay_actor_steps` (0: constant)."""
    if config.decay_actor_steps <= 0:
        fraction = jnp.zeros((), jnp.float32)
    else:
        fraction = jnp.clip(actor_steps.astype(jnp.float32) / config.decay_actor_steps, 0.0, 1.0)
    return value * (1.0 - fraction * (1.0 - final_fraction))


def minibatch_orders(key: jax.Array, count: int, num_epochs: int, num_minibatches: int) -> jax.Array:
    """The rows of every minibatch, (num_epochs * num_minibatches, count // num_minibatches): each epoch a
    shuffle of rows 0..count-1 cut into `num_minibatches` parts."""
    epoch_keys = jax.random.split(key, num_epochs)
    orders = jax.vmap(lambda epoch_key: jax.random.permutation(epoch_key, count))(epoch_keys).reshape(-1)
    return jnp.reshape(orders, (num_epochs * num_minibatches, count // num_minibatches))


def stored_actions(batch: SequenceStep) -> Any:
    """The actions whose probabilities the behaviour policy stored."""
    return batch.extras.get("raw_action", batch.action)


def steps_taken(batch: SequenceStep) -> jax.Array:
    """Actor steps in a batch of sequences (B, L): rows with mask 1 but each sequence's last."""
    return jnp.sum(batch.mask[:, :-1]).astype(jnp.int32)


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.sum(mask * values) / jnp.maximum(jnp.sum(mask), 1.0)
