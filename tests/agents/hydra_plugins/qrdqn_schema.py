"""QR-DQN's Hydra schema. Hydra imports every module under `hydra_plugins` on the Python
path when it starts, before it composes a config: this one stores QRDQNConfig as
`qrdqn_agent_schema`, which conf/agent/qrdqn.yaml extends (as rl/agents/configs.py
`register_schemas` does for the project's agents)."""

from hydra.core.config_store import ConfigStore
from qrdqn import QRDQNConfig

from rl.agents.configs import agent_schema

ConfigStore.instance().store(name="qrdqn_agent_schema", node=agent_schema(QRDQNConfig, "qrdqn.make_builder"))
