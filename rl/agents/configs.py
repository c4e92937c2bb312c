"""The config sections agents share, and how an agent's config dataclass becomes its Hydra
schema `<name>_agent_schema`, which `conf/agent/<name>.yaml` extends. Imports no JAX."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, ClassVar

from rl.checks import require_non_negative, require_positive, require_unit_interval

# Where observations are normalised (agent.normalize_observations), they are clipped to +-this many standard deviations.
OBSERVATION_CLIP = 10.0


@dataclasses.dataclass
class ReplayConfig:
    """The replay section of every replay agent's config (`agent.*`)."""

    discount: float = 0.99
    n_step: int = 1
    batch_size: int = 256
    samples_per_insert: float = 256.0
    min_replay_size: int = 1_000
    max_replay_size: int = 1_000_000
    # SGD steps fused (lax.scan) into one learner step, each on its own batch.
    sgd_steps_per_learner_step: int = 1
    variable_update_period: int = 50  # Actor steps between two fetches of the parameters.
    replay_table_name: str = "replay_table"
    # Sampled by priority ** priority_exponent, the learning writing each sampled item's new priority.
    prioritized: bool = False
    priority_exponent: float = 0.6

    def __post_init__(self) -> None:
        require_positive(self, "batch_size", "samples_per_insert", "n_step", "min_replay_size", "max_replay_size")
        require_positive(self, "sgd_steps_per_learner_step", "variable_update_period")
        require_unit_interval(self, "discount")
        if self.min_replay_size > self.max_replay_size:
            raise ValueError(
                f"min_replay_size ({self.min_replay_size}) must be <= max_replay_size ({self.max_replay_size})"
            )


@dataclasses.dataclass
class QLearningConfig(ReplayConfig):
    """The optimiser and target network of the Q-learning agents (DQN, R2D2)."""

    importance_sampling_exponent: float = 0.4
    learning_rate: float = 5e-4
    # Decay ("linear" or "cosine") to final_learning_rate_fraction of the rate by this actor step (0: none).
    learning_rate_decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 0.0
    learning_rate_decay: str = "linear"
    adam_eps: float = 1e-8
    max_gradient_norm: float = 10.0
    target_update_period: int = 250

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "learning_rate", "target_update_period", "max_gradient_norm")
        if self.learning_rate_decay not in ("linear", "cosine"):
            raise ValueError(f"learning_rate_decay must be one of linear, cosine, got {self.learning_rate_decay!r}")
        require_non_negative(self, "learning_rate_decay_actor_steps")
        require_unit_interval(self, "final_learning_rate_fraction")


@dataclasses.dataclass
class ContinuousConfig(ReplayConfig):
    """The replay and optimisation settings of SAC, TD3 and D4PG (`agent.*`)."""

    policy_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    max_gradient_norm: float | None = None  # Global-norm clipping of both networks (null: none).
    tau: float = 0.005  # Polyak averaging rate of the target networks.
    # Normalise the observations both networks read by running statistics of the replayed batches, clipped to
    # +-observation_clip (Brax's SAC normalises; its statistics follow the collected steps instead).
    normalize_observations: bool = False
    observation_clip: float = OBSERVATION_CLIP

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "policy_learning_rate", "critic_learning_rate", "observation_clip")
        if self.prioritized:
            raise ValueError("prioritized must be false: continuous-control agents write no priorities, got True")
        if self.max_gradient_norm is not None and self.max_gradient_norm <= 0:
            raise ValueError(f"max_gradient_norm must be > 0 or null, got {self.max_gradient_norm}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")


@dataclasses.dataclass
class SequenceQueueConfig:
    """The settings of agents that learn from a queue of rollouts, each trained on once (PPO, IMPALA, PQN)."""

    # How messages name `sequences_per_learner_step`.
    LEARNER_STEP_SEQUENCES: ClassVar[str] = "batch_size"

    # An item holds unroll_length + 1 rows, the last only bootstrapping (the next item's first).
    unroll_length: int = 20
    batch_size: int = 8
    # Items the queue holds before actors wait (null: two learner steps' worth).
    max_queue_size: int | None = None

    discount: float = 0.99
    learning_rate: float = 3e-4
    # Linear decay of the learning rate to final_learning_rate_fraction of it by this actor step (0: none).
    decay_actor_steps: int = 0
    final_learning_rate_fraction: float = 1.0
    max_gradient_norm: float = 0.5
    variable_update_period: int = 1
    replay_table_name: str = "queue"

    def __post_init__(self) -> None:
        require_positive(
            self, "unroll_length", "batch_size", "learning_rate", "max_gradient_norm", "variable_update_period"
        )
        require_unit_interval(self, "discount", "final_learning_rate_fraction")
        require_non_negative(self, "decay_actor_steps")
        if self.max_queue_size is not None and self.max_queue_size < self.sequences_per_learner_step:
            raise ValueError(
                f"max_queue_size ({self.max_queue_size}) must be >= {self.LEARNER_STEP_SEQUENCES} "
                f"({self.sequences_per_learner_step}): the learner could never sample a batch"
            )

    @property
    def sequences_per_learner_step(self) -> int:
        return self.batch_size

    @property
    def queue_size(self) -> int:
        return self.max_queue_size if self.max_queue_size is not None else 2 * self.sequences_per_learner_step

    @property
    def sequence_length(self) -> int:
        return self.unroll_length + 1

    @property
    def sequence_period(self) -> int:
        return self.unroll_length


@dataclasses.dataclass
class OnPolicyConfig(SequenceQueueConfig):
    """The settings PPO and IMPALA share (`agent.*`): the queue's, and the costs of their value and entropy terms."""

    value_cost: float = 0.5
    entropy_cost: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_non_negative(self, "value_cost", "entropy_cost")


@dataclasses.dataclass(frozen=True)
class AgentFactory:
    """The `make_builder` an agent's YAML names: builds the builder from `agent.*` (fields of `config_class`);
    a `"module:Class"` builder is imported when built, so reading a config imports no JAX."""

    builder: type | str
    config_class: type

    def __call__(self, exploration: Any = None, **config: Any) -> Any:
        builder_class = pkgutil.resolve_name(self.builder) if isinstance(self.builder, str) else self.builder
        return builder_class(self.config_class(**config), exploration=exploration)


def builder_factory(builder: type | str, config_class: type) -> AgentFactory:
    """The `make_builder` of an agent: `builder` (a class or `"module:Class"`) given a `config_class`."""
    return AgentFactory(builder, config_class)


def agent_schema(config_class: type, target: str) -> type:
    """The Hydra schema of an agent option: its config's fields and the `_target_` that builds it."""
    target_field = ("_target_", str, dataclasses.field(default=target))
    return dataclasses.make_dataclass(f"{config_class.__name__}Schema", [target_field], bases=(config_class,))


def schema_name(name: str, group: str = "agent") -> str:
    """The ConfigStore name of option `name`'s schema in `group`."""
    return f"{name}_{group}_schema"


def register_schemas() -> None:
    """Stores every agent package's schema in Hydra's ConfigStore as `<name>_agent_schema`: a config at the
    root, not a group, so `--help` lists only the groups a command line chooses from."""
    from hydra.core.config_store import ConfigStore

    import rl.agents

    store = ConfigStore.instance()
    for module in pkgutil.iter_modules(rl.agents.__path__):
        if not module.ispkg:
            continue
        config_class = importlib.import_module(f"rl.agents.{module.name}").make_builder.config_class
        schema = agent_schema(config_class, f"rl.agents.{module.name}.make_builder")
        store.store(name=schema_name(module.name), node=schema)
