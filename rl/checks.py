"""Range checks shared by config dataclasses, so every error reads the same way."""

from __future__ import annotations

from typing import Any


def require_positive(config: Any, *names: str) -> None:
    """Raises a ValueError naming the first field among `names` that is not > 0."""
    for name in names:
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}")
