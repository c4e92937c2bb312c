"""ExperimentConfig: everything needed to build the nodes of one experiment."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Sequence

import dm_env

from rl.checkpointing import CheckpointSettings
from rl.checks import require_positive
from rl.loggers.base import LoggerFactory
from rl.specs import EnvironmentSpec, make_environment_spec

if TYPE_CHECKING:  # Only a type here: importing the builders imports reverb and TensorFlow.
    from rl.agents.builder import ActorLearnerBuilder


@dataclasses.dataclass
class ExperimentConfig:
    """A composed experiment, independent of Hydra and of how its nodes are launched.

    `environment_factory(seed=...)` makes one seeded environment and
    `network_factory(environment_spec=...)` the agent's networks. `observers` are
    observer factories (rl/observers): every actor and evaluator loop gets its own
    observers from them. `evaluator_factories` make the evaluators
    (rl/experiments/builders.py, `EvaluatorFactory`); None means the one default
    evaluator, `build_evaluator`.
    """

    builder: ActorLearnerBuilder
    environment_factory: Callable[[int], dm_env.Environment]
    network_factory: Callable[[EnvironmentSpec], Any]
    logger_factory: LoggerFactory
    seed: int = 0
    max_actor_steps: int = 50_000
    eval_every: int = 10_000
    eval_episodes: int = 10
    run_directory: str = "."
    # Periodic, final and on-stop checkpoints (a bool stands for the defaults, on or off).
    checkpoint: CheckpointSettings | bool = dataclasses.field(default_factory=CheckpointSettings)
    progress: bool = True
    agent_name: str = "agent"
    environment_name: str = "environment"
    learner_log_interval_s: float = 1.0
    observers: Sequence[Callable[..., Any]] = ()
    evaluator_factories: Sequence[Callable[..., Any]] | None = None
    # Environment copies each actor steps with one batched policy call (environment.num_envs).
    num_envs: int = 1
    # `(seed=..., num_envs=...)` -> the copies an actor steps, when another backend than one
    # `environment_factory` environment per copy steps them (environment.backend=envpool).
    vector_environment_factory: Callable[..., Any] | None = None
    # `(seed=...)` -> the environment evaluators play, where it differs from training's:
    # the game's own score, in whole games, when training clips rewards or ends an episode
    # per life (Atari's reward_clip, episodic_life). None: `environment_factory`.
    evaluation_environment_factory: Callable[..., dm_env.Environment] | None = None
    # Directory of the persistent XLA compilation cache (None: no cache).
    compilation_cache: str | None = None
    # The evaluation return that counts as solving the task (None: none); the summary
    # records when it was first reached.
    threshold: float | None = None
    # A resumed run: the checkpoint it continues from (rl.experiments.resume.RestorePoint)
    # and its session (0 for a new run, one more per resume).
    restore: Any = None
    session: int = 0
    _environment_spec: EnvironmentSpec | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        require_positive(self, "max_actor_steps", "eval_every", "eval_episodes", "num_envs")
        if isinstance(self.checkpoint, bool):
            self.checkpoint = CheckpointSettings(enabled=self.checkpoint)

    @property
    def environment_spec(self) -> EnvironmentSpec:
        """The spec of the environment, read once from a throwaway instance."""
        if self._environment_spec is None:
            environment = self.environment_factory(seed=0)
            self._environment_spec = make_environment_spec(environment)
            environment.close()
        return self._environment_spec
