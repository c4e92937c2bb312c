"""launcher=anakin: whole runs (JAX environment, acting, replay, learning) compiled into
one program, with many seeds side by side (docs/anakin.md)."""

from rl.anakin.launcher import AnakinLauncher

__all__ = ["AnakinLauncher"]
