"""Haiku network factories: each builds networks for an environment spec."""

from rl.networks.actor_critic import make_actor_critic_networks
from rl.networks.base import GaussianParams, make_q_network
from rl.networks.policy_value import make_policy_value_network

__all__ = ["GaussianParams", "make_actor_critic_networks", "make_policy_value_network", "make_q_network"]
