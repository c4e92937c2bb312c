"""Environment factories: each returns a dm_env.Environment seeded from a uint32."""

from rl.environments.factories import make_gymnasium_environment, validate_gymnasium_id
from rl.environments.gymnasium_adapter import GymnasiumToDmEnv
from rl.environments.wrappers import (
    EnvironmentWrapper,
    EpisodeStatisticsWrapper,
    SinglePrecisionWrapper,
)

__all__ = [
    "EnvironmentWrapper",
    "EpisodeStatisticsWrapper",
    "GymnasiumToDmEnv",
    "SinglePrecisionWrapper",
    "make_gymnasium_environment",
    "validate_gymnasium_id",
]
