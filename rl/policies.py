"""Action-selection heads named by conf/policy: `head(output, key, step)` acts inside the
actor's jitted policy (continuous heads in [-1, 1]); `exploration_metrics(step)` goes into the
actors' episode records."""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import optax

from rl.checks import require_at_least, require_non_negative, require_unit_interval


class Head(abc.ABC):
    """What every head declares: the actions it acts in, and the exploration it acts with at a step."""

    # "discrete", "continuous", or None: either (checked against the environment before a run).
    action_kind: ClassVar[str | None] = None

    def exploration_metrics(self, step: int) -> dict[str, float]:
        """The exploration at actor step `step`, for records (`{"epsilon": ...}`; none by default)."""
        return {}

    @abc.abstractmethod
    def __call__(self, output: object, key: jax.Array, step: jax.Array) -> jax.Array: ...


@dataclasses.dataclass(frozen=True)
class Greedy(Head):
    """The best action by value: the evaluation policy of value-based agents."""

    action_kind = "discrete"

    def __call__(self, q_values: jax.Array, key: jax.Array, step: jax.Array) -> jax.Array:
        return jnp.argmax(q_values, axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class EpsilonGreedy(Head):
    """Random action with probability epsilon, annealed linearly to `epsilon_end` over
    `decay_fraction` of `run_steps`, of which each of `num_actors` actors counts its share."""

    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    decay_fraction: float = 0.2
    run_steps: int = 50_000
    num_actors: int = 1

    action_kind = "discrete"

    def __post_init__(self) -> None:
        require_unit_interval(self, "epsilon_start", "epsilon_end", "decay_fraction")
        require_at_least(self, 1, "run_steps", "num_actors")

    @property
    def decay_steps(self) -> int:
        return max(1, round(self.decay_fraction * self.run_steps / self.num_actors))

    def epsilon(self, step: jax.Array) -> jax.Array:
        return optax.linear_schedule(self.epsilon_start, self.epsilon_end, self.decay_steps)(step)

    def exploration_metrics(self, step: int) -> dict[str, float]:
        fraction = min(max(step / self.decay_steps, 0.0), 1.0)
        return {"epsilon": self.epsilon_start + (self.epsilon_end - self.epsilon_start) * fraction}

    def __call__(self, q_values: jax.Array, key: jax.Array, step: jax.Array) -> jax.Array:
        explore_key, action_key = jax.random.split(key)
        random_action = jax.random.randint(action_key, q_values.shape[:-1], 0, q_values.shape[-1])
        greedy_action = jnp.argmax(q_values, axis=-1)
        explore = jax.random.uniform(explore_key, q_values.shape[:-1]) < self.epsilon(step)
        return jnp.where(explore, random_action, greedy_action).astype(jnp.int32)


def _uniform_warmup(action: jax.Array, key: jax.Array, step: jax.Array, warmup_steps: int) -> jax.Array:
    if warmup_steps <= 0:
        return action
    uniform = jax.random.uniform(key, action.shape, action.dtype, -1.0, 1.0)
    return jnp.where(step < warmup_steps, uniform, action)


@dataclasses.dataclass(frozen=True)
class Deterministic(Head):
    """The policy's deterministic action in [-1, 1] (the output itself, or tanh(mean)): the evaluation
    policy of continuous-control agents."""

    action_kind = "continuous"

    def __call__(self, output: object, key: jax.Array, step: jax.Array) -> jax.Array:
        from rl.networks.base import GaussianParams

        return jnp.tanh(output.loc) if isinstance(output, GaussianParams) else output


@dataclasses.dataclass(frozen=True)
class GaussianNoise(Head):
    """Deterministic action plus N(0, sigma^2) noise, clipped to [-1, 1]; uniform for the first `warmup_steps`."""

    sigma: float = 0.1
    warmup_steps: int = 0

    action_kind = "continuous"

    def __post_init__(self) -> None:
        require_non_negative(self, "sigma", "warmup_steps")

    def exploration_metrics(self, step: int) -> dict[str, float]:
        return {"sigma": self.sigma}

    def __call__(self, output: object, key: jax.Array, step: jax.Array) -> jax.Array:
        noise_key, warmup_key = jax.random.split(key)
        action = Deterministic()(output, key, step)
        noisy = action + self.sigma * jax.random.normal(noise_key, action.shape, action.dtype)
        return _uniform_warmup(jnp.clip(noisy, -1.0, 1.0), warmup_key, step, self.warmup_steps)


@dataclasses.dataclass(frozen=True)
class Stochastic(Head):
    """A sample of a tanh-Gaussian policy (SAC's); uniformly random for the first `warmup_steps`."""

    warmup_steps: int = 0

    action_kind = "continuous"

    def __post_init__(self) -> None:
        require_non_negative(self, "warmup_steps")

    def __call__(self, output: object, key: jax.Array, step: jax.Array) -> jax.Array:
        from rl.networks.base import GaussianParams, tanh_normal

        if not isinstance(output, GaussianParams):
            raise ValueError("policy=stochastic needs an agent with a stochastic policy network (e.g. sac)")
        sample_key, warmup_key = jax.random.split(key)
        action = tanh_normal(output.loc, output.scale).sample(seed=sample_key)
        return _uniform_warmup(action, warmup_key, step, self.warmup_steps)


@dataclasses.dataclass(frozen=True)
class Sample(Head):
    """A sample of the policy's own action distribution, for on-policy agents (ppo, impala)."""

    def __call__(self, output: object, key: jax.Array, step: jax.Array) -> jax.Array:
        from rl.networks.base import sample_with_log_prob

        return sample_with_log_prob(output, key)[0]
