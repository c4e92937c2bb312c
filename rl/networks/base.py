"""A pure-function pair (init, apply) that hides haiku from agents and launchers."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np
import tree


@dataclasses.dataclass(frozen=True)
class FeedForwardNetwork:
    init: Callable[[jax.Array], Any]
    apply: Callable[..., Any]


def zeros_like_spec(spec: Any, batch_size: int | None = 1) -> Any:
    """A dummy input for `init`: zeros shaped like `spec`, with a leading batch axis."""
    prefix = () if batch_size is None else (batch_size,)
    return tree.map_structure(lambda s: np.zeros(prefix + tuple(s.shape), s.dtype), spec)
