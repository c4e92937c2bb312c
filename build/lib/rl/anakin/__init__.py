"""launcher=anakin: whole runs (environment, acting, replay, learning) in one compiled program, seeds side by side."""

from rl.anakin.launcher import AnakinLauncher

__all__ = ["AnakinLauncher"]
