"""Haiku network factories: each builds networks for an environment spec."""

from rl.networks.actor_critic import ActorCriticNetworks, make_actor_critic_networks
from rl.networks.base import FeedForwardNetwork, GaussianParams, make_q_network, tanh_normal
from rl.networks.policy_value import make_policy_value_network

__all__ = [
    "ActorCriticNetworks",
    "FeedForwardNetwork",
    "GaussianParams",
    "make_actor_critic_networks",
    "make_policy_value_network",
    "make_q_network",
    "tanh_normal",
]
