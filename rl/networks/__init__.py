"""Haiku network factories: each builds networks for an environment spec."""

from rl.networks.base import FeedForwardNetwork
from rl.networks.value import make_q_network

__all__ = ["FeedForwardNetwork", "make_q_network"]
