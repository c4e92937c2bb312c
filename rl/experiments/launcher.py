"""What the entry point asks of a launcher (the class `conf/launcher/<name>.yaml` names)."""

from __future__ import annotations

import re
import socket
from typing import Any, ClassVar

from rl.experiments.config import Experiment

# Modules that only the reverb stack (requirements.txt) has, by the distribution that provides them; the current
# stack (requirements-current.txt, or `pip install .` without the `reverb` extra) has none of them.
REVERB_STACK_MODULES = {"reverb": "dm-reverb", "ray": "ray"}


# A Ray cluster's address as launcher=ray and the grid's Ray engine take it (not `auto`).
RAY_HOST_PORT = re.compile(r"^(ray://)?(?P<host>[^:/\s]+):(?P<port>\d+)$")


def ray_cluster_unreachable(address: str | None, timeout_s: float) -> str | None:
    """Why nothing answers at a `host:port` Ray address within `timeout_s` (None: it answers, or the address
    is none, `auto` or malformed): `ray.init` would wait for minutes instead."""
    match = RAY_HOST_PORT.match(address or "")
    if match is None:
        return None
    try:
        socket.create_connection((match["host"], int(match["port"])), timeout_s).close()
    except OSError as error:
        return str(error)
    return None


class LauncherError(RuntimeError):
    """The run could not start or finish: reported as a message, not a traceback."""


class Launcher:
    """Runs an experiment's nodes and returns its `RunSummary`; `fit_experiment` refuses what only
    this launcher cannot run, `checkpoint_template` is the learner state it saves; `requires` names the modules of
    `REVERB_STACK_MODULES` it runs with (a launcher that needs one is refused where it is missing)."""

    requires: ClassVar[tuple[str, ...]] = ()
    # True: the replay buffer is part of the learner state, sized min(agent.max_replay_size, max_actor_steps)
    # (rl/systems/off_policy.py), so an extended run keeps its buffer's size (rl/experiments/extension.py).
    replay_sized_by_budget: ClassVar[bool] = False
    # True: its jobs can be replicas of one compiled program, each with its own values (hydra/launcher=anakin_grid).
    trains_grid_replicas: ClassVar[bool] = False
    num_seeds = 1  # The replicas a run trains side by side (the compiled launchers' `launcher.num_seeds`).

    def __call__(self, experiment: Experiment) -> Any:
        raise NotImplementedError

    def fit_experiment(self, experiment: Experiment) -> Experiment:
        return experiment

    def checkpoint_template(self, experiment: Experiment) -> Any:
        import jax

        from rl.systems.learning import SGDLearner

        networks = experiment.network_factory(environment_spec=experiment.environment_spec)
        # No counter or logger: the learner counts into its own and logs nothing.
        learning = experiment.builder.make_learning(networks)
        return SGDLearner(learning, jax.random.PRNGKey(0), iter(())).save()

    def replica_learners(self, experiment: Experiment, checkpoint: str) -> Any | None:
        """The agent's learner state of every replica (replicas first) in the run's `checkpoint`, for a launcher
        whose checkpoint holds its replicas' (None: it holds one learner's, `checkpoint_template`'s)."""
        return None
