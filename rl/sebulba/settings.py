"""launcher=sebulba's options and the counts they make: a replica's copies, the steps of each copy one update
learns from, and a replica's steps per update."""

from __future__ import annotations

import dataclasses

from rl.experiments.compiled import system_class
from rl.experiments.config import Experiment
from rl.experiments.validation import ConfigError

ACTOR_DEVICES = ("auto", "learner", "cpu")


@dataclasses.dataclass(frozen=True)
class SebulbaSettings:
    """launcher=sebulba's options (conf/launcher/sebulba.yaml says what each means)."""

    num_seeds: int = 1
    actor_threads: int = 1
    block_length: int = 32
    policy_lag: int = 1
    actor_device: str = "auto"
    environment_threads: int | None = None
    evaluation_processes: int = 0

    def check(self) -> None:
        values = dataclasses.asdict(self)
        minimums = (("num_seeds", 1), ("actor_threads", 1), ("block_length", 1), ("policy_lag", 0))
        for key, minimum in (*minimums, ("evaluation_processes", 0)):
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"launcher.{key}", f"must be an integer >= {minimum}, got {value!r}")
        threads = self.environment_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError("launcher.environment_threads", f"must be an integer >= 1 or null, got {threads!r}")
        if self.actor_device not in ACTOR_DEVICES:
            raise ConfigError(
                "launcher.actor_device", f"must be one of {list(ACTOR_DEVICES)}, got {self.actor_device!r}"
            )


def copies_per_replica(experiment: Experiment, settings: SebulbaSettings) -> int:
    """A replica's environment copies: `environment.num_envs` in each actor thread."""
    return experiment.num_envs * settings.actor_threads


def block_length(experiment: Experiment, settings: SebulbaSettings) -> int:
    """Steps of every copy in one update's block: an on-policy agent's rollout, else `launcher.block_length`."""
    return system_class(experiment, "sebulba").host_block_length(experiment.builder.config, settings.block_length)
