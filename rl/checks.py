"""Range checks for config dataclasses, so every error reads `<name> must be ..., got <value>`."""

from __future__ import annotations

import numbers
from typing import Any, Callable


def _require(config: Any, names: tuple[str, ...], holds: Callable[[Any], bool], condition: str) -> None:
    """Checks the fields `names` of the dataclass instance `config` (read from its `__dict__`). A value that
    is no number is not checked here: a traced one (a grid replica's setting inside its compiled program) was
    checked as its job's own value."""
    for name in names:
        value = vars(config)[name]  # A field the caller names (a dataclass's, so always there).
        if isinstance(value, numbers.Number) and not holds(value):
            raise ValueError(f"{name} must be {condition}, got {value}")


def require_positive(config: Any, *names: str) -> None:
    _require(config, names, lambda value: value > 0, "> 0")


def require_at_least(config: Any, minimum: int, *names: str) -> None:
    _require(config, names, lambda value: not value < minimum, f">= {minimum}")


def require_non_negative(config: Any, *names: str) -> None:
    require_at_least(config, 0, *names)


def require_unit_interval(config: Any, *names: str) -> None:
    _require(config, names, lambda value: 0.0 <= value <= 1.0, "in [0, 1]")
