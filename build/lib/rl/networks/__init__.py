"""Haiku network factories: each builds networks for an environment spec."""

from rl.networks.base import GaussianParams, make_actor_critic_networks, make_policy_value_network, make_q_network

__all__ = ["GaussianParams", "make_actor_critic_networks", "make_policy_value_network", "make_q_network"]
