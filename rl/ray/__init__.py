"""launcher=ray: every node in its own Ray process, placed and watched by the driver. Inside this package
`import ray` is the Ray library (imports are absolute); importing the package imports no Ray."""

from rl.ray.launcher import RayLauncher

__all__ = ["RayLauncher"]
