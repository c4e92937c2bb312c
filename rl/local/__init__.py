"""launcher=local: replay, learner (on its own thread), one actor and one evaluator in this process."""

from rl.local.launcher import LocalLauncher

__all__ = ["LocalLauncher"]
