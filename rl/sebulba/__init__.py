"""launcher=sebulba: environments on the host's cores (actor threads), policies and learning compiled on the
device, seeds side by side in one learner program."""

from rl.sebulba.launcher import SebulbaLauncher

__all__ = ["SebulbaLauncher"]
