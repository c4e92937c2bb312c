"""Range checks for config dataclasses (agents, policies, launchers), so every error reads
the same way: `<name> must be ..., got <value>`."""

from __future__ import annotations

from typing import Any


def require_positive(config: Any, *names: str) -> None:
    """Raises a ValueError naming the first field among `names` that is not > 0."""
    for name in names:
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}")


def require_at_least(config: Any, minimum: int, *names: str) -> None:
    """Raises a ValueError naming the first field among `names` below `minimum`."""
    for name in names:
        if getattr(config, name) < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {getattr(config, name)}")


def require_non_negative(config: Any, *names: str) -> None:
    """Raises a ValueError naming the first field among `names` that is < 0."""
    require_at_least(config, 0, *names)


def require_unit_interval(config: Any, *names: str) -> None:
    """Raises a ValueError naming the first field among `names` outside [0, 1]."""
    for name in names:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(config, name)}")
