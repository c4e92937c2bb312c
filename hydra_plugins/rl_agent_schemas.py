"""Stores the project's agent schemas in Hydra's ConfigStore whenever Hydra starts.

Hydra imports every module under `hydra_plugins` on the Python path before it composes a
config, so `conf/agent/<name>.yaml` finds `<name>_agent_schema` from the command line,
from Hydra's compose API (notebooks, benchmarks) and from any other entry point alike.
"""

from rl.agents.configs import register_schemas

register_schemas()
