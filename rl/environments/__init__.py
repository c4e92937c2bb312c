"""Environment factories (conf/environment `_target_`s): each returns a dm_env.Environment seeded from a uint32."""

from rl.environments.factories import make_dm_control_environment, make_gymnasium_environment  # noqa: F401
from rl.environments.factories import make_gymnax_environment, make_mujoco_environment  # noqa: F401
from rl.environments.factories import make_playground_environment  # noqa: F401
