"""Environment factories (conf/environment `_target_`s): each returns a dm_env.Environment seeded from a uint32."""

from rl.environments.factories import make_dm_control_environment, make_gymnasium_environment
from rl.environments.factories import make_gymnax_environment, make_mujoco_environment

__all__ = [
    "make_dm_control_environment",
    "make_gymnasium_environment",
    "make_gymnax_environment",
    "make_mujoco_environment",
]
