"""Environment factories: each returns a dm_env.Environment seeded from a uint32."""

from rl.environments.dm_control import (
    FlatDmControlWrapper,
    make_dm_control_environment,
    validate_dm_control_task,
)
from rl.environments.factories import make_gymnasium_environment, validate_gymnasium_id
from rl.environments.gymnasium_adapter import GymnasiumToDmEnv
from rl.environments.gymnax_factory import make_gymnax_environment
from rl.environments.mujoco import MUJOCO_TASKS, make_mujoco_environment, validate_mujoco_id
from rl.environments.wrappers import (
    EnvironmentWrapper,
    EpisodeStatisticsWrapper,
    SinglePrecisionWrapper,
)

__all__ = [
    "EnvironmentWrapper",
    "EpisodeStatisticsWrapper",
    "FlatDmControlWrapper",
    "GymnasiumToDmEnv",
    "MUJOCO_TASKS",
    "SinglePrecisionWrapper",
    "make_dm_control_environment",
    "make_gymnasium_environment",
    "make_gymnax_environment",
    "make_mujoco_environment",
    "validate_dm_control_task",
    "validate_gymnasium_id",
    "validate_mujoco_id",
]
